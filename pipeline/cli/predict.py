"""`semworld predict` (clip or states in words -> predicted states and frames) and `semworld serve` (the API)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.cli.flags import add_command, add_pydantic_flags, check_pydantic_flags
from pipeline.utils import UserError, default_weights_dir, read_model_index
from pipeline.wordfiles import read_actions_file, read_states_file

if TYPE_CHECKING:
    from pipeline.video import SampledClip, VideoLimits
    from pipeline.world_model import WorldModelOutput

logger = logging.getLogger(__name__)


def read_truth(path: Path, clip: Path | None) -> list[str]:
    """Ground-truth states: the states.jsonl record whose clip is `clip` (else the first), or a text file."""
    if not path.is_file():
        raise UserError(f"--truth {path}: no such file")
    if path.suffix != ".jsonl":
        return read_states_file(path)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not records:
        raise UserError(f"--truth {path}: no records")
    for rec in records:
        if clip is not None and rec.get("clip") and (path.parent / rec["clip"]).resolve() == clip.resolve():
            return list(rec["states"])
    return list(records[0]["states"])


def compare(label: str, got: list[str], truth: list[str], offset: int) -> tuple[int, int]:
    """Print got vs truth side by side; return (exact matches, compared)."""
    hits = n = 0
    print(f"{label}:")
    for i, s in enumerate(got):
        t = offset + i
        true = truth[t] if t < len(truth) else None
        mark = " " if true is None else ("=" if s == true else "x")
        hits += mark == "="
        n += true is not None
        print(f"  t={t:<3d} {mark} {s}")
        if true is not None and s != true:
            print(f"        truth {true}")
    return hits, n


def _truth_frames(truth: list[str] | None, output: WorldModelOutput, index: dict) -> list:
    """The true frames of the predicted steps, drawn by the weights' domain ([] when there is no truth, the domain
    cannot draw a state, or a true state does not parse)."""
    from pipeline.domain import domain_of_index

    if truth is None:
        return []
    domain = domain_of_index(index)
    n = len(output.observed_states)
    wanted = truth[n : n + len(output.predicted_states)]
    try:
        frames = [domain.draw(s, 128) for s in wanted]
    except ValueError as err:
        logger.warning("--truth: no side-by-side video (%s)", err)
        return []
    return [] if any(f is None for f in frames) else frames


def _sureness(output: WorldModelOutput, i: int) -> str:
    """ "[-0.001]  " before a read state (with "?" when it is unsure), or "" for states given in words."""
    from pipeline.confidence import unsure

    c = output.observed_confidence[i] if i < len(output.observed_confidence) else None
    ok = output.observed_parses[i] if i < len(output.observed_parses) else None
    if not output.source_indices or (
        c is None and ok is None
    ):  # given in words (checked already), or unknown
        return ""
    mark = "?" if unsure(c, ok, output.confidence_threshold) else " "
    return f"[{'  n/a ' if c is None else f'{c:+.3f}'}]{mark} "


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def add_placement_flags(p: argparse.ArgumentParser, env: bool = False) -> None:
    """--dtype, --stage-device, --stage-dtype and --compile (pipeline.placement.resolve_placement)."""
    names = (
        " (SEMWORLD_DTYPE)",
        " (SEMWORLD_STAGE_DEVICES)",
        " (SEMWORLD_STAGE_DTYPES)",
        " (SEMWORLD_COMPILE)",
    )
    say = names if env else ("",) * 4
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="compute dtype of every stage (default: bf16 on a CUDA GPU that has it, else fp32; "
                   "the predictor's softmax stays fp32)" + say[0])  # fmt: skip
    p.add_argument("--stage-device", action="append", default=None, metavar="STAGE=DEVICE",
                   help="put one stage on another device, e.g. captioner=cpu (repeatable)" + say[1])  # fmt: skip
    p.add_argument("--stage-dtype", action="append", default=None, metavar="STAGE=DTYPE",
                   help="one stage's dtype, e.g. predictor=float32 (repeatable)" + say[2])  # fmt: skip
    p.add_argument("--compile", action="store_true", default=None,
                   help="torch.compile the predictor's rollout step (CUDA graphs on a GPU; eager if it cannot "
                   "compile)" + say[3])  # fmt: skip


# What the CLI says of a parameter beyond its description in pipeline.params (the default as the CLI reads it).
SAMPLING_DEFAULT = (
    "default: the weights' state_rate in model_index.json (the shipped models: 2), else every frame"
)
FLAG_NAMES = {"horizon": ("--horizon", "-k")}
METAVARS = {"horizon": "K", "stride": "K", "state_rate": "HZ", "context": "N", "seed": "S", "steps": "N",
            "guidance": "G"}  # fmt: skip


def add_param_flags(p: argparse.ArgumentParser, extra: dict[str, str] | None = None) -> None:
    """One flag per call parameter of `pipeline.params.ForecastParams` (the same in `predict` and `batch`): its
    type, default and description from the model, which also checks the values (`check_param_flags`); --stride
    and --state-rate exclude each other. `extra` adds words to a parameter's help."""
    from pipeline.params import ForecastParams

    add_pydantic_flags(p, ForecastParams, flags=FLAG_NAMES, metavars=METAVARS,
                       defaults={"stride": SAMPLING_DEFAULT, "state_rate": SAMPLING_DEFAULT}, extra=extra,
                       exclusive=("stride", "state_rate"))  # fmt: skip


def check_param_flags(args: argparse.Namespace) -> None:
    """The call parameters' flags checked by their model before anything is read or loaded: a UserError that
    names the flag ("--state-rate: Input should be less than or equal to 240, got 500.0")."""
    from pipeline.params import ForecastParams, check_params

    check_pydantic_flags(args, ForecastParams, check_params, FLAG_NAMES)


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """--captioner/--predictor/--renderer DIR, --no-project and --mirror: which models, and how the predictor
    forecasts (the same in `predict` and `batch`)."""
    for stage in ("captioner", "predictor", "renderer"):
        p.add_argument(
            f"--{stage}", type=Path, default=None, metavar="DIR",
            help=f"load the {stage} from DIR instead of the one the weights' model_index.json names",
        )  # fmt: skip
    p.add_argument(
        "--no-project", dest="project", action="store_false",
        help="keep the predictor's raw argmax states instead of projecting each onto the closest valid state of "
        "the domain the weights' model_index.json names, when it has a grammar (default: project)",
    )  # fmt: skip
    p.add_argument(
        "--mirror", action="store_true",
        help="forecast from the mean of each history and its mirror (a domain with a mirror, such as the "
        "built-in shapes world; about 2.7x the predictor's time; docs/predictor_world.md has what it gains)",
    )  # fmt: skip


def add_history_flags(p: argparse.ArgumentParser, more_actions: str = "") -> None:
    """CLIP, --states FILE and --actions FILE: where a forecast (or a plan) starts."""
    p.add_argument("clip", nargs="?", type=Path, help="a video file (omit with --states)")
    p.add_argument("--states", type=Path, help="start from states in words, one per line, instead of a clip")
    p.add_argument("--actions", type=Path, help="a predictor with actions (docs/atari.md): one action word per "
                   f"line, the action after each observed state ('?': unknown){more_actions}")  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    """Add `predict` and `serve` to the CLI."""
    register_predict(sub)
    register_serve(sub)


def register_predict(sub: argparse._SubParsersAction) -> None:
    """Add `predict`: a clip (or states in words) in, the next states and their frames out."""
    p = add_command(sub, "predict", run_predict)
    add_history_flags(p, ", then one per forecast step")
    p.add_argument("--out", type=Path, required=True, help="output directory (created if missing)")
    add_param_flags(p, {"context": "hold the rest out, e.g. for --truth"})
    p.add_argument(
        "--weights", type=Path, default=None,
        help="weights directory (default: $SEMWORLD_WEIGHTS_DIR, else the shipped weights/)",
    )  # fmt: skip
    add_model_flags(p)
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="torch CPU threads (default: one fewer than the usable cores, at least 1: torch's own "
        "default of one per core stalls when anything else runs on the machine; docs/benchmarks.md)",
    )
    p.add_argument(
        "--device", default=None, help="torch device for every stage (default: cuda if available, else cpu)"
    )
    add_placement_flags(p)
    p.add_argument("--max-frames", type=_positive_int, default=64,
                   help="most states a clip may give (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--truth",
        type=Path,
        default=None,
        help="ground-truth states of the whole clip (states.jsonl of `semworld world generate`, or one "
        "state per line) to compare what was read and predicted against",
    )
    p.add_argument(
        "--render-context", type=int, default=None, metavar="N",
        help="also draw the last N observed states (default: every state given with --states, none for a clip, "
        "whose frames are shown)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")


def register_serve(sub: argparse._SubParsersAction) -> None:
    """Add `serve`: the HTTP API and web page, its most common settings as flags."""
    s = add_command(sub, "serve", run_serve)
    s.add_argument("--host", default=os.environ.get("SEMWORLD_HOST", "127.0.0.1"),
                   help="address to listen on; a non-loopback one needs SEMWORLD_API_KEY (SEMWORLD_HOST; "
                   "default %(default)s)")  # fmt: skip
    s.add_argument("--port", type=int, default=int(os.environ.get("SEMWORLD_PORT", "8000")),
                   help="port to listen on (SEMWORLD_PORT; default %(default)s)")  # fmt: skip
    s.add_argument("--weights", type=Path, default=None,
                   help="weights directory (SEMWORLD_WEIGHTS_DIR; default: the shipped weights/)")  # fmt: skip
    s.add_argument("--device", default=None,
                   help="torch device (SEMWORLD_DEVICE; default: cuda if available, else cpu)")  # fmt: skip
    s.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="torch CPU threads (SEMWORLD_THREADS; default: one fewer than the usable cores)",
    )
    add_placement_flags(s, env=True)
    s.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="jobs database and results (SEMWORLD_DATA_DIR; default data/api)",
    )
    s.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug", "trace"),
                   help="uvicorn's log level, requests included at info (default %(default)s)")  # fmt: skip
    s.add_argument(
        "--ray", action="store_true",
        help="run on Ray Serve: replicas of the whole pipeline behind one HTTP endpoint, on a local Ray instance "
        "or the cluster SEMWORLD_RAY_ADDRESS names (the `distributed` extra; settings SEMWORLD_RAY_*, docs/scaling.md)",
    )  # fmt: skip
    s.add_argument(
        "--replicas", type=_positive_int, default=None,
        help="with --ray: replicas of the pipeline (SEMWORLD_RAY_REPLICAS; default 1)",
    )  # fmt: skip
    s.add_argument(
        "--serve-without-key", action="store_true", default=_env_flag(WITHOUT_KEY_ENV),
        help=f"listen on a non-loopback address without SEMWORLD_API_KEY: anyone who reaches the port may use "
        f"the service ({WITHOUT_KEY_ENV}=1)",
    )  # fmt: skip


@dataclass
class PredictInputs:
    """What `predict` checked and read before any model loads: the states given in words or the sampled clip,
    the weights folder and its index, the stages given folders of their own, the clip limits."""

    states: list[str] | None
    clip: SampledClip | None
    weights: Path
    index: dict[str, Any]
    own: dict[str, Path | None]
    limits: VideoLimits
    render_context: int
    stages: tuple[str, ...]  # the stages to load: the weights may lack a captioner or a renderer
    actions: list[str | None] | None


def read_inputs(args: argparse.Namespace) -> PredictInputs:
    """Everything that needs no model, checked first: the flags, the device, the weights' folders, the states in
    words (against the weights' domain and vocabulary), and the clip, read at the weights' state rate."""
    from pipeline.loading import check_written_states_for, index_state_rate, named_stages, stage_folders
    from pipeline.placement import resolve_placement
    from pipeline.utils import MODEL_INDEX
    from pipeline.video import TooManyStatesError, VideoLimits
    from pipeline.world_model import sample_clip

    if (args.clip is None) == (args.states is None):
        raise UserError("give either a CLIP or --states FILE (not both)")
    check_param_flags(args)
    if args.clip is not None and not args.clip.is_file():
        raise UserError(f"{args.clip}: no such file")
    states = read_states_file(args.states) if args.states is not None else None
    if states is not None and (args.stride or args.state_rate):
        logger.info("--stride/--state-rate ignored: starting from states")
    # (the devices and dtypes: a device this machine lacks or a bad STAGE=VALUE is one line, before any load)
    resolve_placement(args.device, args.dtype, stage_devices=args.stage_device, stage_dtypes=args.stage_dtype)
    weights = args.weights or default_weights_dir()
    overrides = {stage: getattr(args, stage) for stage in ("captioner", "predictor", "renderer")}
    stages = named_stages(weights, overrides)  # weights of a domain may lack a captioner or a renderer
    if states is None and "captioner" not in stages:
        raise UserError(
            f"{weights}: these weights have no captioner to read a clip; start from --states FILE"
        )
    folders, index = stage_folders(weights, overrides, stages)
    rate = index_state_rate(index, weights / MODEL_INDEX)
    actions = read_actions_file(args.actions) if args.actions is not None else None
    if states is not None:
        check_written_states_for(states, folders, index, label=f"--states {args.states}: state")
    limits = VideoLimits(max_frames=args.max_frames)
    clip = None
    if args.clip is not None:
        try:
            clip = sample_clip(args.clip, args.stride, args.state_rate, limits, rate)
        except TooManyStatesError as err:
            raise UserError(f"{err} (or raise --max-frames); no model was loaded") from None
        if args.stride is None and args.state_rate is None and rate is not None:
            logger.info("reading %s at %g states per second (the weights' state_rate)", args.clip, rate)
    render_context = args.render_context
    if render_context is None:
        render_context = len(states) if states is not None else 0
    most = len(states) if states is not None else args.max_frames
    if not 0 <= render_context <= most:
        raise UserError(f"--render-context: expected 0..{most}, got {render_context}")
    own = {stage: folders.get(stage) if overrides[stage] is not None else None for stage in overrides}
    return PredictInputs(states, clip, weights, index, own, limits, render_context, stages, actions)


def run_predict(args: argparse.Namespace) -> int:
    """Read a clip (or states in words), forecast the next states and draw them.

    Read CLIP as states (or start from --states), predict the next --horizon states, draw them, and write into
    --out: predicted_NNN.png (one per predicted state), observed_NNN.png (the clip's sampled frames),
    predicted.mp4 (the forecast, H.264), context_forecast.mp4 (the observed frames, or the drawn given states,
    then the forecast), forecast_vs_truth.mp4 (with --truth, for weights of the built-in world: the forecast
    beside the true frames), states.json (every state, its confidence and what changed) and strip.png (all of it
    in one picture)."""
    from pipeline.outputs import state_fields, write_outputs
    from pipeline.placement import set_threads
    from pipeline.world_model import WorldModelPipeline

    got = read_inputs(args)
    logger.debug("torch threads: %d", set_threads(args.threads))
    pipe = WorldModelPipeline.from_pretrained(
        got.weights, device=args.device, dtype=args.dtype, stage_devices=args.stage_device,
        stage_dtypes=args.stage_dtype, compile=bool(args.compile), limits=got.limits, project=args.project,
        mirror=args.mirror, captioner=got.own["captioner"], predictor=got.own["predictor"],
        renderer=got.own["renderer"], stages=got.stages,
    )  # fmt: skip
    from_clip = got.states is None
    output = pipe(
        got.clip,
        states=got.states,
        horizon=args.horizon,
        stride=args.stride if from_clip else None,
        state_rate=args.state_rate if from_clip else None,
        seed=args.seed,
        steps=args.steps,
        guidance=args.guidance,
        context=args.context if from_clip else None,
        render_context=got.render_context if "renderer" in got.stages else 0,
        render="renderer" in got.stages,
        encode_video=True,
        actions=got.actions,
    )
    truth = read_truth(args.truth, args.clip) if args.truth is not None else None
    files = write_outputs(output, args.out, truth_frames=_truth_frames(truth, output, got.index))
    if args.json:
        summary = {
            **state_fields(output),
            "frames": [str(p) for p in files.predicted_frames],
            "video": str(files.video) if files.video else None,
            "states_file": str(files.states),
            "strip": str(files.strip),
            "context_forecast_video": str(files.story) if files.story else None,
            "forecast_vs_truth_video": str(files.versus) if files.versus else None,
            "timings": {k: round(v, 4) for k, v in output.timings.items()},
            **({"truth": truth} if truth is not None else {}),
        }
        print(json.dumps(summary, indent=2))
        return 0
    source = f"{args.clip}" if args.clip else f"{args.states} (states in words)"
    print_states(output, source, truth)
    videos = [str(v) for v in (files.video, files.story, files.versus) if v]
    n_frames = len(files.predicted_frames)
    drawn = [f"{n_frames} frame{'' if n_frames == 1 else 's'}", *videos] if n_frames else []
    print(f"wrote {', '.join([*drawn, str(files.states)])} and {files.strip}")
    print(f"took {output.timings['total']:.2f} s")
    return 0


def print_states(output: WorldModelOutput, source: str, truth: list[str] | None) -> None:
    """What was read and predicted, one state a line; beside the truth when there is one."""
    n = len(output.observed_states)
    if truth is not None:
        print("(= matches the ground truth, x differs)")
        read_hits, read_n = compare(f"read {n} states from {source}", output.observed_states, truth, 0)
        pred_hits, pred_n = compare(f"predicted {len(output.predicted_states)} states", output.predicted_states,
                                    truth, n)  # fmt: skip
        print(
            f"read correctly: {read_hits}/{read_n}; predicted correctly: {pred_hits}/{pred_n}"
            + ("" if pred_n == len(output.predicted_states) else " (the rest is past the end of the truth)")
        )
        return
    scored = any(c is not None for c in output.observed_confidence)
    print(
        f"read {n} states from {source}"
        + (" (confidence: mean token log-prob, 0 is sure):" if scored else ":")
    )
    acts = list(output.actions)
    then = [
        f"  -> {acts[t] or '?'}" if acts and t < len(acts) else ""
        for t in range(n + len(output.predicted_states))
    ]
    for i, s in enumerate(output.observed_states):
        print(f"  t={i:<3d} {_sureness(output, i)}{s}{then[i]}")
    outside = [ok is False for ok in output.predicted_parses] or [False] * len(output.predicted_states)
    mark = f" (? : not a {output.domain} state):" if any(outside) else ":"
    print(
        f"predicted {len(output.predicted_states)} states{mark}"
        + (" (-> the action after it)" if acts else "")
    )
    for j, s in enumerate(output.predicted_states):
        print(f"  t={n + j:<3d} {'? ' if outside[j] else ''}{s}{then[n + j]}")


WITHOUT_KEY_ENV = "SEMWORLD_SERVE_WITHOUT_KEY"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def check_bind(host: str, has_key: bool, without_key: bool) -> None:
    """Refuse to listen beyond this machine without an API key, unless the operator said so explicitly."""
    if is_loopback(host) or has_key or without_key:
        return
    raise UserError(
        f"--host {host}: refusing to serve on a non-loopback address without an API key; set SEMWORLD_API_KEY, "
        f"or pass --serve-without-key ({WITHOUT_KEY_ENV}=1) to let anyone who reaches the port use it"
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run the HTTP API and web page (uvicorn, one worker: one process owns the models).

    Serve api.main:app with uvicorn. Settings come from SEMWORLD_* environment variables (see docs/api.md); the
    flags below override the most common ones. Alone it is for loopback and trusted networks (uvicorn does not cut
    off slow clients); elsewhere run it behind docker/nginx.conf (docs/reliability.md)."""
    # The CLI is the outermost layer: it may start the API (api never imports the CLI).
    import uvicorn

    from api.main import create_app
    from api.settings import Settings

    # SEMWORLD_* variables (and .env) first; the flags override them, passed in, not through the environment.
    flags = {
        "weights_dir": args.weights,
        "device": args.device,
        "data_dir": args.data_dir,
        "dtype": args.dtype,
        "compile": args.compile,
        "threads": args.threads,
    }
    from pipeline.placement import parse_stage_options

    if args.stage_device:
        flags["stage_devices"] = parse_stage_options(args.stage_device, "--stage-device")
    if args.stage_dtype:
        flags["stage_dtypes"] = parse_stage_options(args.stage_dtype, "--stage-dtype")
    settings = Settings(**{k: v for k, v in flags.items() if v is not None})
    key = settings.api_key.get_secret_value() if settings.api_key is not None else ""
    check_bind(args.host, bool(key), args.serve_without_key)
    if not settings.pipeline_factory:
        read_model_index(
            settings.weights_dir
        )  # a missing folder or index: one line and exit 2, before serving
    if args.ray:
        return _run_ray(settings, args)
    if args.replicas is not None:
        raise UserError("--replicas needs --ray (the plain server is one process owning the models)")
    # One worker: one process owns the models (and the GPU); requests share it.
    uvicorn.run(create_app(settings), host=args.host, port=args.port, workers=1, log_level=args.log_level)
    return 0


def _run_ray(settings: Any, args: argparse.Namespace) -> int:
    """`semworld serve --ray`: the same app as replicas of a Ray Serve deployment, until interrupted."""
    from api.ray_serve import RaySettings, run

    try:
        import ray.serve  # noqa: F401
    except ImportError as err:
        raise UserError(f"--ray needs Ray Serve: pip install 'semworld[distributed]' ({err})") from None
    ray_settings = RaySettings(**({"replicas": args.replicas} if args.replicas is not None else {}))
    run(settings, ray_settings, args.host, args.port, args.log_level)
    return 0
