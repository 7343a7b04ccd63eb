"""Throughput of offline processing, side by side in one run: a shell loop of `semworld predict` (models loaded
for every clip) vs `semworld batch` with 1 and 2 workers vs `semworld batch --ray` on a local Ray instance, on
the same world clips; then how a batch run's cost grows with the clip length and with the number of clips.

Every engine runs as the command a user types (a subprocess from the repository root, `python -m pipeline.cli`,
the `semworld` entry point), timed wall clock from start to exit, model loading included. The shell loop is timed
on the first --loop-clips clips (its calls are independent, so its rate does not depend on how many it does).

    .venv/bin/python -m bench.batch_speed                        # 100 clips, shipped weights, ~10 min on 2 cores
    .venv/bin/python -m bench.batch_speed --clips 8 --loop-clips 2 --lengths 6 12 --length-clips 2   # smoke

Writes runs/bench/batch_speed.{json,md} and the plot docs/img/batch_cost.png (--plot).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "pipeline.cli"]
# A `--no-progress` line per finished clip, "[7/100] 000006 ok 0.41 s", whatever the log format around it.
DONE = re.compile(r"\[(\d+)/(\d+)\] \S+ (?:ok|failed)\b")


def env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}


def world(out: Path, clips: int, length: int) -> Path:
    """`clips` test-split world clips of `length` states (128 px), generated once and kept."""
    folder = out / f"world-{clips}x{length}"
    if not (folder / "states.jsonl").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(
            [*CLI, "world", "generate", "--scenario", "all", "--clips", str(clips), "--split", "test",
             "--length", str(length), "--size", "128", "--out", str(folder), "--no-progress"],
            cwd=REPO, env=env(1), check=True, capture_output=True,
        )  # fmt: skip
    return folder / "clips"


Lines = list[tuple[float, str]]  # (seconds since the command started, line) as the line arrived


def timed(argv: list[str], threads: int, shell: bool = False) -> tuple[float, Lines]:
    """Run a command; wall seconds and its output lines (stdout and stderr together), each stamped on arrival.
    The stamps come from this clock, not from the log format, which a user-facing CLI may change."""
    t = time.perf_counter()
    run = subprocess.Popen(
        argv if not shell else ["bash", "-c", argv[0]],
        cwd=REPO,
        env=env(threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # the log goes to stderr, a line at a time
        text=True,
    )
    assert run.stdout is not None
    lines = [(time.perf_counter() - t, line.rstrip("\n")) for line in run.stdout]
    seconds = time.perf_counter() - t
    if run.wait() != 0:
        tail = "\n".join(line for _, line in lines[-60:])
        raise SystemExit(f"failed ({run.returncode}): {' '.join(argv)}\n{tail}")
    return seconds, lines


def shell_loop(clips: list[Path], out: Path, args: argparse.Namespace) -> float:
    """`for c in ...; do semworld predict $c ...; done`, as a user would write it."""
    names = " ".join(str(c) for c in clips)
    cli = " ".join(CLI)
    script = (
        f'for c in {names}; do {cli} predict "$c" --out {out}/$(basename "$c" .mp4) --stride {args.stride} '
        f"-k {args.horizon} --device cpu > /dev/null || exit 1; done"
    )
    seconds, _ = timed([script], args.threads, shell=True)
    return seconds


def batch(
    inputs: Path, out: Path, args: argparse.Namespace, *extra: str, threads: int
) -> tuple[float, dict, Lines]:
    shutil.rmtree(out, ignore_errors=True)
    argv = [*CLI, "batch", str(inputs), "--out", str(out), "--stride", str(args.stride), "-k", str(args.horizon),
            "--device", "cpu", "--no-progress", *extra]  # fmt: skip
    if "--ray" not in extra and "--threads" not in extra:
        argv += ["--threads", str(threads)]
    seconds, log = timed(argv, threads)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["failed"] == 0, summary["failed"]
    return seconds, summary, log


def completion_times(lines: Lines) -> list[tuple[int, float]]:
    """(clips done, seconds since the first clip finished) from the `--no-progress` lines of a run."""
    points = [(int(m.group(1)), t) for t, line in lines if (m := DONE.search(line))]
    if not points:
        raise SystemExit("no '[n/N] clip ok' lines in the batch log: did its --no-progress format change?")
    t0 = points[0][1]
    return [(n, round(t - t0, 3)) for n, t in points]


def line_fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least-squares y = a + b x, with R^2 and the largest residual relative to the y range."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    a = my - b * mx
    res = [y - (a + b * x) for x, y in zip(xs, ys, strict=True)]
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum(r * r for r in res) / ss if ss else 1.0
    span = (max(ys) - min(ys)) or 1.0
    return {
        "a": round(a, 4),
        "b": round(b, 5),
        "r2": round(r2, 4),
        "max_dev": round(max(map(abs, res)) / span, 4),
    }


def plot(path: Path, growth: list[tuple[int, float]], lengths: list[dict], fits: dict[str, dict]) -> None:
    """Seconds vs clips done (1 worker) and seconds per clip vs frames per clip, each with its line fit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    if growth:
        n, t = zip(*growth, strict=True)
        left.plot(n, t, ".", ms=4, label="clip finished")
        f = fits["clips"]
        left.plot([n[0], n[-1]], [f["a"] + f["b"] * n[0], f["a"] + f["b"] * n[-1]], "-", lw=1,
                  label=f"fit: {f['b']:.3f} s per clip, R² {f['r2']:.4f}")  # fmt: skip
        left.set(xlabel="clips done", ylabel="seconds after the first clip", title="cost vs number of clips")
        left.legend(loc="upper left", fontsize=8)
    frames = [r["frames"] for r in lengths]
    bottom = [0.0] * len(lengths)
    for stage in ("decode", "caption", "predict", "render", "write"):
        h = [r["per_clip_stage_s"][stage] for r in lengths]
        right.bar(frames, h, width=min(frames) * 0.6, bottom=bottom, label=stage)
        bottom = [b + x for b, x in zip(bottom, h, strict=True)]
    f = fits["length"]
    right.plot([0, max(frames) * 1.05], [f["a"], f["a"] + f["b"] * max(frames) * 1.05], "k-", lw=1,
               label=f"fit: {f['a']:.3f} s + {1000 * f['b']:.2f} ms per frame")  # fmt: skip
    right.set(xlabel="frames per clip (stride 5)", ylabel="seconds per clip (stages summed)",
              title="cost vs clip length (horizon 8)", xlim=(0, max(frames) * 1.1))  # fmt: skip
    right.set_ylim(0, max(bottom) * 1.6)  # room for the legend above the bars
    right.legend(loc="upper left", fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clips", type=int, default=100)
    p.add_argument("--loop-clips", type=int, default=20, help="clips the shell loop is timed on")
    p.add_argument("--length", type=int, default=12, help="states per clip of the throughput runs")
    p.add_argument(
        "--lengths", type=int, nargs="+", default=[6, 12, 24, 48], help="clip lengths (states) to time"
    )
    p.add_argument("--length-clips", type=int, default=10, help="clips per length")
    p.add_argument(
        "--length-rounds", type=int, default=2, help="interleaved rounds over the lengths (min kept)"
    )
    p.add_argument("--only-lengths", action="store_true", help="skip the throughput runs")
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument(
        "--stride", type=int, default=5, help="the world's frames per state: one state per instant"
    )
    p.add_argument(
        "--threads", type=int, default=2, help="torch threads of a one-process run (all the cores)"
    )
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bench" / "batch")
    p.add_argument("--json", type=Path, default=REPO / "runs" / "bench" / "batch_speed.json")
    p.add_argument("--markdown", type=Path, default=REPO / "runs" / "bench" / "batch_speed.md")
    p.add_argument("--plot", type=Path, default=REPO / "docs" / "img" / "batch_cost.png")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()

    clips = world(args.out, args.clips, args.length)
    files = sorted(clips.glob("*.mp4"))
    rows: dict[str, dict] = {}
    cpus = os.cpu_count() or 1

    growth: list[tuple[int, float]] = []
    same = None
    if not args.only_lengths:
        print(f"shell loop of semworld predict on {args.loop_clips} clips ...", flush=True)
        s = shell_loop(files[: args.loop_clips], args.out / "loop", args)
        rows["shell loop of `semworld predict`"] = {"clips": args.loop_clips, "seconds": s}

        print(f"semworld batch, 1 worker, {len(files)} clips ...", flush=True)
        s, one, log = batch(
            clips,
            args.out / "batch-1",
            args,
            "--workers",
            "1",
            "--threads",
            str(args.threads),
            threads=args.threads,
        )
        rows["`semworld batch --workers 1`"] = {"clips": len(files), "seconds": s}
        growth = completion_times(log)

        print("semworld batch, 2 workers ...", flush=True)
        threads = max(1, cpus // 2)
        s, two, _ = batch(
            clips, args.out / "batch-2", args, "--workers", "2", "--threads", str(threads), threads=threads
        )
        rows["`semworld batch --workers 2`"] = {"clips": len(files), "seconds": s}

        print("semworld batch --ray (a new local Ray instance) ...", flush=True)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        s, ray_summary, _ = batch(clips, args.out / "batch-ray", args, "--ray", threads=args.threads)
        rows["`semworld batch --ray`"] = {"clips": len(files), "seconds": s}
        same = all(
            (args.out / d / "states.jsonl").read_text() == (args.out / "batch-1" / "states.jsonl").read_text()
            for d in ("batch-2", "batch-ray")
        )

        loop_rate = (
            60
            * rows["shell loop of `semworld predict`"]["clips"]
            / rows["shell loop of `semworld predict`"]["seconds"]
        )
        for row in rows.values():
            row["clips_per_minute"] = round(60 * row["clips"] / row["seconds"], 2)
            row["vs_loop"] = round(row["clips_per_minute"] / loop_rate, 2)

    print("cost vs clip length ...", flush=True)
    # Rounds over the lengths, interleaved (6 12 24 6 12 24 ...), and the fastest round of each length kept:
    # on a shared machine the load drifts between runs, and the minimum is the least disturbed measurement.
    best: dict[int, dict] = {}
    for _ in range(args.length_rounds):
        for length in args.lengths:
            folder = world(args.out, args.length_clips, length)
            s, summ, _ = batch(
                folder, args.out / f"len-{length}", args, "--workers", "1", threads=args.threads
            )
            work = [sum(c["seconds"].values()) for c in summ["clips"]]
            row = {
                "states": length, "frames": length * args.stride, "clips": len(work), "wall_s": round(s, 2),
                "per_clip_s": round(sum(work) / len(work), 4),
                "per_clip_stage_s": {
                    k: round(sum(c["seconds"].get(k, 0) for c in summ["clips"]) / len(work), 4)
                    for k in ("decode", "caption", "predict", "render", "write")
                },
            }  # fmt: skip
            if length not in best or row["per_clip_s"] < best[length]["per_clip_s"]:
                best[length] = row
    lengths = [best[n] for n in args.lengths]
    fits = {"length": line_fit([r["frames"] for r in lengths], [r["per_clip_s"] for r in lengths])}
    if growth:
        fits["clips"] = line_fit([n for n, _ in growth], [t for _, t in growth])
    # The marks of the clips-done line: a quarter, a half, three quarters and all of the run.
    marks = [
        (n, t)
        for n, t in growth
        if n in {1, len(growth) // 4, len(growth) // 2, 3 * len(growth) // 4, len(growth)}
    ]

    result = {
        "machine": f"{platform.processor() or platform.machine()}, {cpus} CPUs, python {platform.python_version()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "when": datetime.now().isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "throughput": rows,
        "local_and_ray_states_equal": same,
        # The target compares Ray with the local path on the same cores: 2 workers use both, as Ray does.
        "ray_vs_local_2_workers": round(rows["`semworld batch --ray`"]["seconds"] / rows["`semworld batch --workers 2`"]["seconds"], 2) if rows else None,
        "ray_vs_local_1_worker": round(rows["`semworld batch --ray`"]["seconds"] / rows["`semworld batch --workers 1`"]["seconds"], 2) if rows else None,
        "growth_with_clips": growth,
        "growth_with_length": lengths,
        "fits": fits,
    }  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    md = [
        "| engine | clips | wall s (models loaded included) | clips/min | vs shell loop |",
        "|---|---:|---:|---:|---:|",
        *[f"| {k} | {r['clips']} | {r['seconds']:.1f} | {r['clips_per_minute']:.1f} | {r['vs_loop']:.1f}x |"
          for k, r in rows.items()],  # fmt: skip
        "",
        "| states per clip | frames | clips | wall s | s per clip | decode | caption | predict | render | write |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {r['states']} | {r['frames']} | {r['clips']} | {r['wall_s']} | {r['per_clip_s']:.3f} | "
          + " | ".join(f"{r['per_clip_stage_s'][k]:.3f}" for k in ("decode", "caption", "predict", "render", "write"))
          + " |" for r in lengths],  # fmt: skip
        "",
        f"cost vs frames per clip: {fits['length']['a']:.3f} s + {1000 * fits['length']['b']:.2f} ms per frame, "
        f"R^2 {fits['length']['r2']}, largest residual {100 * fits['length']['max_dev']:.1f}% of the range",
        "",
        *(["| clips done (1 worker) | " + " | ".join(str(n) for n, _ in marks) + " |",
           "|---|" + "---:|" * len(marks),
           "| seconds after the first | " + " | ".join(f"{t:.1f}" for _, t in marks) + " |",
           "",
           f"cost vs clips done: {fits['clips']['b']:.3f} s per clip, R^2 {fits['clips']['r2']}, largest residual "
           f"{100 * fits['clips']['max_dev']:.1f}% of the range"] if growth else []),  # fmt: skip
        f"Ray / local wall time: {result['ray_vs_local_2_workers']}x vs 2 workers, {result['ray_vs_local_1_worker']}x vs 1 worker"
        if rows else "",
        f"local and Ray states.jsonl equal: {same}; load average before {result['load_average_before']}, after {result['load_average_after']}",
    ]  # fmt: skip
    if args.plot:
        plot(args.plot, growth, lengths, fits)
        md.append(f"plot: {args.plot}")
    args.markdown.write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
