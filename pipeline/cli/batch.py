"""`semworld batch`: folders, globs or manifests of videos -> one output folder per clip, OUT/states.jsonl and
OUT/summary.json; resumable; locally in worker processes or on a Ray cluster (`--ray`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pipeline.cli.flags import add_command
from pipeline.cli.predict import (
    _positive_float,
    _positive_int,
    add_model_flags,
    add_param_flags,
    add_placement_flags,
    check_param_flags,
)
from pipeline.utils import UserError

TABLE_ROWS = 40  # the end table lists at most this many clips (every failed one, then the others)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "batch", run_batch_command)
    p.add_argument("inputs", nargs="+", metavar="IN", help="a folder, a glob, a video file, or a manifest")
    p.add_argument("--out", type=Path, required=True, help="output folder (created if missing)")
    p.add_argument(
        "--pattern", default=None, help="file glob inside folders (default: common video suffixes)"
    )
    p.add_argument("--recursive", action="store_true", help="look into subfolders of IN folders")
    add_param_flags(p, {"horizon": "per clip; a manifest line may set its own", "seed": "of every clip"})
    p.add_argument(
        "--stages",
        default="caption,predict,render",
        help="caption | caption,predict | caption,predict,render (default); `caption` alone turns videos into "
        "a states corpus",
    )
    p.add_argument("--workers", type=_positive_int, default=1, help="local worker processes (default 1)")
    p.add_argument("--threads", type=_positive_int, default=None, help="torch threads per worker")
    p.add_argument("--weights", type=Path, default=None, help="weights directory (default: shipped weights/)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument(
        "--max-frames", type=_positive_int, default=64, help="most states a clip may give (default 64)"
    )
    p.add_argument(
        "--max-duration", type=_positive_float, default=120.0, help="longest clip in seconds (default 120)"
    )
    add_model_flags(p)
    add_placement_flags(p)
    p.add_argument(
        "--caption-batch",
        type=_positive_int,
        default=16,
        help="frames per captioner pass (default %(default)s)",
    )
    p.add_argument(
        "--render-batch", type=_positive_int, default=8, help="states per renderer pass (default %(default)s)"
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const=True,
        default=False,
        metavar="ADDRESS",
        help="run on Ray Data: a new local Ray instance, or the cluster at ADDRESS (auto, HOST:6379, "
        "ray://HOST:10001). Needs `pip install semworld[distributed]`",
    )
    p.add_argument(
        "--ray-stage",
        action="append",
        default=[],
        metavar="STAGE:KEY=VALUE,...",
        help="size one Ray stage (decode, caption, predict, render, write) with concurrency, num_gpus, "
        "num_cpus, batch_size; e.g. caption:concurrency=2,num_gpus=0.5,batch_size=32 (repeatable)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="log lines instead of a bar")
    p.add_argument("--dry-run", action="store_true", help="list what would be done, and do nothing")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of the table")


def parse_ray_stages(specs: list[str]) -> dict[str, dict[str, float | int]]:
    """["caption:concurrency=2,num_gpus=0.5"] -> {"caption": {"concurrency": 2, "num_gpus": 0.5}}."""
    from pipeline.batch.ray import RAY_STAGES, STAGE_KEYS

    out: dict[str, dict[str, float | int]] = {}
    for spec in specs:
        stage, _, rest = spec.partition(":")
        if stage not in RAY_STAGES or not rest:
            raise UserError(
                f"--ray-stage {spec}: expected STAGE:KEY=VALUE,... with STAGE one of {', '.join(RAY_STAGES)}"
            )
        for item in rest.split(","):
            key, _, value = item.partition("=")
            if key not in STAGE_KEYS:
                raise UserError(f"--ray-stage {spec}: unknown key {key!r} (known: {', '.join(STAGE_KEYS)})")
            try:
                number = float(value) if key in ("num_gpus", "num_cpus") else int(value)
            except ValueError:
                raise UserError(f"--ray-stage {spec}: {key} needs a number, got {value!r}") from None
            out.setdefault(stage, {})[key] = number
    return out


def default_state_rate(weights: Path | None) -> float | None:
    """The states per second a run reads clips at when it gives neither --stride nor --state-rate: the weights'
    `state_rate` (model_index.json), as `semworld predict` does; None (every frame) when they name none or the
    stages come from a pipeline factory."""
    import os

    from pipeline.batch.clip import FACTORY_ENV
    from pipeline.loading import index_state_rate
    from pipeline.utils import MODEL_INDEX, default_weights_dir, read_model_index

    folder = weights or default_weights_dir()
    if os.environ.get(FACTORY_ENV) or not (folder / MODEL_INDEX).is_file():
        return None  # (a folder without an index is refused with its own message before any work)
    return index_state_rate(read_model_index(folder), folder / MODEL_INDEX)


def _settings(args: argparse.Namespace) -> Any:
    from pipeline.batch.jobs import BatchSettings, parse_stages

    check_param_flags(args)
    if args.stride is None and args.state_rate is None:
        args.state_rate = default_state_rate(args.weights.expanduser().resolve() if args.weights else None)
    try:
        return BatchSettings(
            out=args.out.expanduser().resolve(),
            stages=parse_stages(args.stages),
            horizon=args.horizon,
            stride=args.stride,
            state_rate=args.state_rate,
            context=args.context,
            seed=args.seed,
            steps=args.steps,
            guidance=args.guidance,
            max_frames=args.max_frames,
            max_duration_s=args.max_duration,
            weights=args.weights.expanduser().resolve() if args.weights else None,
            device=args.device,
            caption_batch_size=args.caption_batch,
            render_batch_size=args.render_batch,
            captioner=args.captioner,
            predictor=args.predictor,
            renderer=args.renderer,
            dtype=args.dtype,
            stage_devices=tuple(args.stage_device or ()),
            stage_dtypes=tuple(args.stage_dtype or ()),
            compile=bool(args.compile),
            project=args.project,
            mirror=args.mirror,
        )
    except ValueError as err:
        raise UserError(str(err)) from None


def run_batch_command(args: argparse.Namespace) -> int:
    """Process folders of videos offline: one output folder per clip, resumable.

    Run caption -> predict -> render on every clip of IN (folders, globs, video files, or manifests: a .txt of
    paths, or a .jsonl of {"path": ..., "horizon": ..., "stride": ...}). Each clip gets OUT/<name>/ with the files
    of `semworld predict`; OUT/states.jsonl feeds `semworld train predictor`; OUT/summary.json says what happened
    to each clip. Rerun the same command to finish a run that was stopped: complete clips are skipped. Exit code
    0: every clip succeeded; 1: some failed (summary.json names them); 2: bad arguments."""
    from pipeline.batch.jobs import collect_jobs
    from pipeline.batch.runner import EngineOptions, make_plan, run_batch
    from pipeline.placement import resolve_placement

    settings = _settings(args)
    # a device this machine lacks or a bad STAGE=VALUE: one line, before any clip is read
    resolve_placement(settings.device, settings.dtype, stage_devices=settings.stage_devices or None,
                      stage_dtypes=settings.stage_dtypes or None)  # fmt: skip
    ray_stages = parse_ray_stages(args.ray_stage)
    if args.ray_stage and not args.ray:
        raise UserError("--ray-stage sizes the stages of a Ray run: add --ray")
    if args.ray:
        from pipeline.batch.ray import require_ray

        require_ray()  # one line saying how to install it, before any work
    jobs = collect_jobs(args.inputs, settings, pattern=args.pattern, recursive=args.recursive)
    if not jobs:
        raise UserError(f"no videos found in {' '.join(args.inputs)} (see --pattern and --recursive)")
    if args.dry_run:
        print_plan(make_plan(jobs, settings), settings)
        return 0
    options = EngineOptions(
        workers=args.workers,
        threads=args.threads,
        progress=args.progress,
        ray=args.ray,
        ray_stages=ray_stages,
    )
    summary = run_batch(jobs, settings, options)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_summary(summary)
    return 1 if summary["counts"]["failed"] else 0


def print_plan(plan: Any, settings: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"semworld batch --dry-run: {len(plan.jobs)} clips -> {settings.out}")
    for col in ("clip folder", "source", "would", "horizon", "sampling"):
        table.add_column(col)
    for job in plan.jobs:
        sampling = f"{job.state_rate:g} Hz" if job.state_rate else f"stride {job.stride or 1}"
        would = "skip (complete)" if job.name in plan.done else "run " + ",".join(settings.stages)
        table.add_row(job.name, str(job.source), would, str(job.horizon), sampling)
    Console(width=160).print(table)
    print(f"{len(plan.todo)} to run, {len(plan.done)} complete; nothing was done (--dry-run)")


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    clips = summary["clips"]
    shown = [c for c in clips if c["status"] == "failed"] + [c for c in clips if c["status"] != "failed"]
    shown = shown[:TABLE_ROWS]
    stages = ("decode", "caption", "predict", "render", "write")
    table = Table(title=f"semworld batch -> {summary['out']}")
    for col in ("clip", "status", "states", "unsure", *[f"{s} s" for s in stages], "error"):
        table.add_column(col, justify="right" if col.endswith(" s") else "left")
    for c in shown:
        sec = c["seconds"]
        doubt = c.get("unsure_states", 0)
        table.add_row(
            c["name"],
            c["status"],
            f"{c['observed_states']} -> {c['predicted_states']}",
            f"[bold yellow]{doubt}/{c['observed_states']} ![/]" if c.get("warnings") else str(doubt or ""),
            *[f"{sec[s]:.2f}" if s in sec else "" for s in stages],
            c["error"] or "",
        )
    console = Console(width=160)
    console.print(table)
    if len(clips) > len(shown):
        print(f"... {len(clips) - len(shown)} more clips in {summary['out']}/summary.json")
    warned: dict[str, list[str]] = {}
    for c in clips:
        for w in c.get("warnings", []):
            warned.setdefault(w, []).append(c["name"])
    for text, names in warned.items():  # one line per distinct warning, naming its clips
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        print(f"warning ({', '.join(names[:3])}{more}; marked ! above): {text}")
    n = summary["counts"]
    rate = f", {summary['clips_per_minute']} clips/min" if summary.get("clips_per_minute") else ""
    print(
        f"{n['ok']} done, {n['skipped']} skipped (complete), {n['failed']} failed in {summary['seconds']:.1f} s"
        f"{rate}; states in {summary['out']}/states.jsonl, summary in {summary['out']}/summary.json"
    )
