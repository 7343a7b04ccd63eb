"""The scoring behind `semworld eval world`: the three stages on a directory written by `semworld world generate`.

Owns the world metrics of the shipped models: captioner exact match on the PNG frames (or on the MP4 clips' frames
of a domain that writes no PNGs), predictor exact match by horizon on the steps the history determines (rolled out
from true histories, beside a copy-last-state reference), and the renderer round trip (render a state, caption it,
compare) with PSNR and SSIM against `world.render_state`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline import utils
from pipeline.domain import Domain, can_generate, domain_of_index, get_domain
from pipeline.evaluation.metrics import psnr, scene_groups, ssim
from pipeline.interfaces import Predictor
from pipeline.utils import (
    MODEL_INDEX,
    UserError,
    canonical_state,
    read_model_index,
    resolve_device,
    user_file,
)

logger = logging.getLogger(__name__)

PARTS = ("captioner", "predictor", "renderer")
STATES_FILE = "states.jsonl"


# ---- data ----------------------------------------------------------------------------------------------
@dataclass
class Clip:
    """One line of states.jsonl: its states, predictable flags, scenario, the folder of its PNG frames (the
    built-in world writes them) and its MP4 file, in which state k is frame k * stride."""

    index: int
    states: list[str]
    predictable: list[bool]
    scenario: str
    frames_dir: Path | None
    video: Path | None = None
    stride: int = 1


def clips_from_records(records: Sequence[dict[str, Any]]) -> list[Clip]:
    """Clips of world records in memory (`world.sequences`), with no frames, in order."""
    return [
        Clip(i, list(r["states"]), [bool(p) for p in r["predictable"]], str(r["scenario"]), None)
        for i, r in enumerate(records)
    ]


def read_world_dir(data: str | Path) -> list[Clip]:
    """The clips of a `world generate` directory (states.jsonl, frames/<clip>/<k>.png); one-line errors."""
    root = Path(data)
    path = user_file(root, STATES_FILE, "a directory made by `semworld world generate`")
    clips: list[Clip] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            states = list(rec["states"])
            predictable = [bool(p) for p in rec.get("predictable", [True] * len(states))]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise UserError(f"{path}:{lineno}: not a world record ({type(err).__name__}: {err})") from None
        if len(predictable) != len(states):
            raise UserError(f"{path}:{lineno}: {len(states)} states but {len(predictable)} predictable flags")
        frames_dir = video = None
        if rec.get("clip"):
            candidate = root / "frames" / Path(rec["clip"]).stem
            frames_dir = candidate if candidate.is_dir() else None
            video = root / rec["clip"] if (root / rec["clip"]).is_file() else None
        scenario = str(rec.get("scenario", "unknown"))
        stride = int(rec.get("stride", 1))
        clips.append(Clip(len(clips), states, predictable, scenario, frames_dir, video, stride))
    if not clips:
        raise UserError(f"{path}: no clips")
    return clips


def family_of(scenario: str) -> str:
    """The world family of a scenario name ("physics", "memory", "stochastic"), or "other"."""
    from world import SCENARIOS

    return SCENARIOS[scenario].family if scenario in SCENARIOS else "other"


def read_png(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a PNG file."""
    import cv2

    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise UserError(f"{path}: not a readable image")
    return np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))


# ---- metrics -------------------------------------------------------------------------------------------
def _rate(hits: Sequence[bool]) -> float | None:
    return round(sum(hits) / len(hits), 4) if hits else None


def n_objects(state: str) -> int | None:
    """Objects in a valid state (None when it does not parse)."""
    from world import parse_state

    try:
        return len(parse_state(state).objects)
    except ValueError:
        return None


def is_valid_state(state: str) -> bool:
    return n_objects(state) is not None


# ---- captioner -----------------------------------------------------------------------------------------
def captioner_pairs(clips: Sequence[Clip]) -> list[tuple[Path, int, str]]:
    """(file, frame, true state) for every state whose frame the data has: a PNG of the clip's frames folder
    (frame -1), else its frame of the clip's MP4 (an Atari domain's clips have no PNGs)."""
    pairs: list[tuple[Path, int, str]] = []
    for c in clips:
        if c.frames_dir is not None:
            pairs += [(c.frames_dir / f"{k:02d}.png", -1, s) for k, s in enumerate(c.states)]
        elif c.video is not None:
            pairs += [(c.video, k * c.stride, s) for k, s in enumerate(c.states)]
    return pairs


def score_captioner(
    captioner: Any,
    clips: Sequence[Clip],
    max_frames: int | None = None,
    batch_size: int = 64,
    domain: Domain | None = None,
) -> dict[str, Any]:
    """Exact match of captions of the clips' frames against the true states, overall and by object count (the
    built-in world) or by field (`domain`'s fields, the other domains)."""
    from pipeline.evaluation.metrics import caption_scores
    from pipeline.video import read_video

    pairs = captioner_pairs(clips)
    if max_frames is not None:
        pairs = pairs[:max_frames]
    if not pairs:
        return {"skipped": "no frames in the data directory: neither PNG frames nor MP4 clips"}
    decoded: dict[Path, list[np.ndarray]] = {}

    def frame(path: Path, k: int) -> np.ndarray:
        if k < 0:
            return read_png(path)
        if path not in decoded:
            decoded.clear()  # one clip's frames at a time
            decoded[path] = list(read_video(path).frames)
        if k >= len(decoded[path]):
            raise UserError(f"{path}: {len(decoded[path])} frames, fewer than its states")
        return decoded[path][k]

    read: list[str] = []
    by_count: dict[str, list[bool]] = {}
    unshown = getattr(domain, "unshown", None)
    hidden: list[bool] = []  # frames that cannot show their state (a domain's `unshown`)
    t0 = time.perf_counter()
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i : i + batch_size]
        frames = [frame(p, k) for p, k, _ in chunk]
        read += captioner.caption(frames)
        if callable(unshown):
            hidden += [bool(unshown(f, s)) for f, (_, _, s) in zip(frames, chunk)]
    truths = [canonical_state(s) for _, _, s in pairs]
    read = [canonical_state(r) for r in read]
    for r, s in zip(read, truths):
        count = n_objects(s)
        if count is not None:
            by_count.setdefault(f"objects={count}", []).append(r == s)
    out: dict[str, Any] = {"exact_match": _rate([r == s for r, s in zip(read, truths)]), "frames": len(read)}
    if hidden:  # the rate on the frames that show their state, and the share that do not
        out["exact_match_shown"] = _rate([r == s for r, s, h in zip(read, truths, hidden) if not h])
        out["unshown_share"] = _rate(hidden)
    if by_count:
        out["by_objects"] = {k: _rate(v) for k, v in sorted(by_count.items())}
    if domain is not None and domain.name != "shapes":
        scores = caption_scores(domain, read, truths)
        out["by_field"] = {
            k.removeprefix("field="): round(v, 4) for k, v in scores.items() if k != "exact_match"
        }
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


# ---- predictor -----------------------------------------------------------------------------------------
class CopyLast:
    """The copy-last-state reference: every future state equals the last state seen."""

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        return [[h[-1]] * k for h in states]


# Rollouts start from every true history of at least this many states, whatever the predictor's window.
DEFAULT_MIN_HISTORY = 4


def score_predictor(
    predictor: Predictor,
    clips: Sequence[Clip],
    horizon: int = 8,
    min_history: int = DEFAULT_MIN_HISTORY,
    batch_size: int = 256,
) -> dict[str, Any]:
    """Exact match at horizons 1..`horizon` on the steps the history determines, rolling out from true histories.

    Every clip position s >= `min_history` starts a rollout from the true states 0..s-1; the state predicted
    at horizon h is compared with true state s+h-1. A target counts when the history determines it: that state
    and every state between the history and it are flagged predictable (`Clip.predictable`: determined by the
    states before it), so no random event (an object that appeared, the lamp's first switch) happened inside the
    rollout. At h = 1 that is the flagged step itself. `by_horizon`, `by_family`, `by_scenario` (each a
    {horizon: rate} map, with `steps` and `family_steps` counting targets) are on these targets.

    `by_horizon_flagged` (`flagged_steps`, `by_family_flagged`) keeps every flagged step, also those that lie
    after a random event inside the rollout; `by_horizon_after_event` (`after_event_steps`) has those alone: no
    history determines them, so their share caps what any predictor reaches on the flagged steps at long
    horizons. Also: horizon-1 results on unpredictable steps, and the share of predictions that are valid world
    states (at horizon 1, and at every horizon over all rollouts).
    """
    if horizon < 1 or min_history < 1:
        raise ValueError(f"horizon and min_history must be >= 1, got {horizon}, {min_history}")
    starts = [(c, s) for c in clips for s in range(min_history, len(c.states))]
    if not starts:
        return {"skipped": f"no clip has more than {min_history} states"}
    hits: dict[tuple[str, str, int], list[bool]] = {}
    unpredictable: list[bool] = []
    valid: list[bool] = []
    valid_by_h: dict[int, list[bool]] = {}  # every rollout's state at each horizon, predictable or not
    t0 = time.perf_counter()
    for i in range(0, len(starts), batch_size):
        chunk = starts[i : i + batch_size]
        # True world states never need cutting; a predictor with fewer token slots than the world's 16 cuts them.
        futures = predictor.predict([c.states[:s] for c, s in chunk], horizon, truncate=True)
        for (clip, s), future in zip(chunk, futures):
            future = [canonical_state(f) for f in future]
            valid.append(is_valid_state(future[0]))
            for h, f in enumerate(future, start=1):
                valid_by_h.setdefault(h, []).append(is_valid_state(f))
            _tally_rollout(clip, s, future, horizon, hits, unpredictable)
    return {
        **_horizon_tables(hits, horizon),
        "unpredictable_h1": _rate(unpredictable),
        "unpredictable_steps": len(unpredictable),
        "valid_h1": _rate(valid),
        "valid_by_horizon": {str(h): _rate(v) for h, v in sorted(valid_by_h.items())},
        "rollouts": len(starts),
        "min_history": min_history,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _tally_rollout(
    clip: Clip,
    s: int,
    future: list[str],
    horizon: int,
    hits: dict[tuple[str, str, int], list[bool]],
    unpredictable: list[bool],
) -> None:
    """Add one rollout from the history clip.states[:s] to `hits`, keyed (kind, name, horizon): "flagged" every
    flagged target, "event" those after a random event inside the rollout, and "all" / "family" / "scenario"
    the ones the history determines; a horizon-1 target that is not flagged goes to `unpredictable`."""
    family = family_of(clip.scenario)
    for h in range(1, horizon + 1):
        t = s + h - 1
        if t >= len(clip.states):
            break
        hit = future[h - 1] == canonical_state(clip.states[t])
        if not clip.predictable[t]:
            if h == 1:
                unpredictable.append(hit)
            continue
        hits.setdefault(("flagged", "all", h), []).append(hit)
        hits.setdefault(("flagged_family", family, h), []).append(hit)
        if not all(clip.predictable[s:t]):  # a random event inside the rollout: no history foretells it
            hits.setdefault(("event", "all", h), []).append(hit)
            continue
        for key in (("all", "all"), ("family", family), ("scenario", clip.scenario)):
            hits.setdefault((*key, h), []).append(hit)


def _horizon_tables(hits: dict[tuple[str, str, int], list[bool]], horizon: int) -> dict[str, Any]:
    """The {horizon: rate} maps and {horizon: count} maps of score_predictor's report, from `_tally_rollout`'s
    hits."""

    def table(kind: str, name: str) -> dict[str, Any]:
        return {str(h): _rate(hits.get((kind, name, h), [])) for h in range(1, horizon + 1)}

    def counts(kind: str, name: str) -> dict[str, int]:
        return {str(h): len(hits.get((kind, name, h), [])) for h in range(1, horizon + 1)}

    families = sorted({k[1] for k in hits if k[0] == "flagged_family"})
    scenarios = sorted({k[1] for k in hits if k[0] == "scenario"})
    return {
        "by_horizon": table("all", "all"),
        "steps": counts("all", "all"),
        "by_family": {f: table("family", f) for f in families},
        "family_steps": {f: counts("family", f) for f in families},
        "by_horizon_flagged": table("flagged", "all"),
        "flagged_steps": counts("flagged", "all"),
        "by_family_flagged": {f: table("flagged_family", f) for f in families},
        "by_horizon_after_event": table("event", "all"),
        "after_event_steps": counts("event", "all"),
        "by_scenario": {s: table("scenario", s) for s in scenarios},
    }


# ---- renderer ------------------------------------------------------------------------------------------
def score_renderer(
    renderer: Any,
    clips: Sequence[Clip],
    captioner: Any | None = None,
    max_states: int = 32,
    seed: int = 0,
    steps: int | None = None,
    guidance: float | None = None,
    batch_size: int = 8,
) -> dict[str, Any]:
    """Render up to `max_states` distinct true states (first seen first); PSNR and SSIM against the world's
    frame of each at the rendered size and, with a captioner, the round trip (caption == requested state); both
    also by object count, screen and lamp (`scene_groups`)."""
    from world import render_state

    seen: dict[str, None] = {}
    for c in clips:
        for s in c.states:
            seen.setdefault(s, None)
    states = list(seen)[:max_states]
    generator = torch.Generator("cpu").manual_seed(seed)
    t0 = time.perf_counter()
    frames: list[np.ndarray] = []
    for i in range(0, len(states), batch_size):
        frames += renderer.render(
            states[i : i + batch_size], generator=generator, steps=steps, guidance=guidance
        )
    seconds = time.perf_counter() - t0
    truth = [render_state(s, size=f.shape[0]) for s, f in zip(states, frames)]
    out: dict[str, Any] = {
        "states": len(states),
        "psnr": round(psnr(np.stack(truth), np.stack(frames)), 3),
        "ssim": round(float(np.mean([ssim(t, f) for t, f in zip(truth, frames)])), 4),
        "size": int(frames[0].shape[0]),
        "steps": steps,
        "guidance": guidance,
        "seed": seed,
        "seconds_per_frame": round(seconds / max(1, len(states)), 3),
    }
    if hasattr(renderer, "settings"):  # the Renderer adapter: report the defaults it sampled with
        out["steps"] = steps if steps is not None else getattr(renderer.settings, "steps", None)
        out["guidance"] = guidance if guidance is not None else getattr(renderer.settings, "guidance", None)
    if captioner is None:
        out["roundtrip"] = "skipped: no captioner weights to read the frames back"
    else:
        read = captioner.caption(frames)
        hits = [canonical_state(r) == canonical_state(s) for r, s in zip(read, states)]
        out["roundtrip_acc"] = _rate(hits)
        out["roundtrip_by_scene"] = {
            k: _rate([hits[i] for i in idx]) for k, idx in scene_groups(states).items()
        }
    out["psnr_by_scene"] = {k: round(psnr(np.stack([truth[i] for i in idx]), np.stack([frames[i] for i in idx])), 3)
                            for k, idx in scene_groups(states).items()}  # fmt: skip
    out["states_by_scene"] = {k: len(idx) for k, idx in scene_groups(states).items()}
    return out


# ---- the whole evaluation ------------------------------------------------------------------------------
@dataclass
class EvalWorldArgs:
    """What `semworld eval world` scores. data: a `world generate` directory. weights: a folder with
    model_index.json naming a folder per stage (or plain captioner/ predictor/ renderer/ folders). parts: the
    stages to score. horizon: predictor horizons 1..horizon. max_frames: cap on captioned frames (None: all).
    render_states: distinct states rendered. steps/guidance: renderer overrides (None: its saved defaults).
    seed: renderer noise. device: "auto", "cpu", "cuda"... threads: torch CPU threads (None: torch's).
    project: project predicted states onto the grammar model_index.json names (pipeline/projection.py; no
    grammar: nothing to project). mirror: average the predictor with its left-right mirror (pipeline/symmetry.py).
    min_history: rollouts start from every true history of at least this many
    states (None: the predictor's window T, at most 4, so that models of every window are scored on the same
    starts; a shorter history is front-padded as `Predictor.predict` does). domain: the domain of the data, one
    that records data sets with true states and frames (None: the weights' own when it does, else the built-in
    shapes world). The stages read and write in the domain the weights' model_index.json names (free text without
    one), which decides projection and mirror."""

    data: str
    weights: str = "weights"
    parts: tuple[str, ...] = PARTS
    horizon: int = 8
    max_frames: int | None = None
    render_states: int = 32
    steps: int | None = None
    guidance: float | None = None
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    project: bool = True
    mirror: bool = False
    min_history: int | None = None
    domain: str | None = None

    def __post_init__(self) -> None:
        self.parts = tuple(self.parts)
        if self.min_history is not None and self.min_history < 1:
            raise UserError(f"--min-history must be >= 1, got {self.min_history}")
        unknown = [p for p in self.parts if p not in PARTS]
        if unknown or not self.parts:
            raise UserError(
                f"--parts: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(PARTS)}"
            )
        if (
            self.horizon < 1
            or self.render_states < 1
            or (self.max_frames is not None and self.max_frames < 1)
        ):
            raise UserError("--horizon, --render-states and --max-frames must be positive")


def stage_folder(weights: Path, stage: str) -> Path | None:
    """The folder of a stage: named by model_index.json when there is one, else weights/<stage>; None when it
    does not exist (that stage is skipped)."""
    index = read_model_index(weights) if (weights / MODEL_INDEX).is_file() else {stage: stage}
    folder = utils.stage_folder(weights, index, stage)
    return folder if folder is not None and folder.is_dir() else None


def evaluate_world(args: EvalWorldArgs) -> dict[str, Any]:
    """Score each requested stage whose weights exist; a missing stage gives {"skipped": reason}."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    weights = Path(args.weights)
    index = read_model_index(weights) if (weights / MODEL_INDEX).is_file() else {}
    domain = domain_of_index(index, weights / MODEL_INDEX)  # the stages' language
    data_domain = get_domain(args.domain or (domain.name if can_generate(domain) else "shapes"))
    if not can_generate(data_domain):
        raise UserError(f"--domain {args.domain}: eval world scores a data set with true states and frames, and the "
                        f"{data_domain.name} domain records none")  # fmt: skip
    clips = read_world_dir(args.data)
    folders = {p: stage_folder(weights, p) for p in PARTS}
    scenarios: dict[str, int] = {}
    for c in clips:
        scenarios[c.scenario] = scenarios.get(c.scenario, 0) + 1
    result: dict[str, Any] = {
        "data": str(args.data),
        "weights": str(weights),
        "clips": len(clips),
        "states": sum(len(c.states) for c in clips),
        "scenarios": scenarios,
        "args": asdict(args),
    }

    def missing(stage: str) -> dict[str, str]:
        return {
            "skipped": f"no {stage} weights in {weights} (expected {weights / stage}/ or an entry in "
            f"{MODEL_INDEX})"
        }

    captioner = None
    if folders["captioner"] is not None and ("captioner" in args.parts or "renderer" in args.parts):
        from pipeline.captioner import Captioner

        captioner = Captioner.from_pretrained(folders["captioner"], device=device, domain=domain)
    if "captioner" in args.parts:
        logger.info("scoring the captioner")
        result["captioner"] = (
            missing("captioner")
            if captioner is None
            else {
                "weights": str(folders["captioner"]),
                **score_captioner(captioner, clips, args.max_frames, domain=domain),
            }
        )
    for part in ("predictor", "renderer"):
        folder = folders[part]
        if part not in args.parts:
            continue
        logger.info("scoring the %s", part)
        if folder is None:
            result[part] = missing(part)
        elif part == "predictor":
            result[part], result["copy_last"] = _predictor_part(folder, clips, args, device, domain)
        else:
            from pipeline.renderer import Renderer

            renderer = Renderer.from_pretrained(folder, device=device)
            sampling = (args.render_states, args.seed, args.steps, args.guidance)
            result[part] = {"weights": str(folder), **score_renderer(renderer, clips, captioner, *sampling)}
    return result


def _predictor_part(
    folder: Path, clips: Sequence[Clip], args: EvalWorldArgs, device: torch.device, domain: Domain
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The predictor's scores (with what it is and how it forecasts) and the copy-last reference's, from the same
    starts."""
    from pipeline.predictor import Predictor

    predictor = Predictor.from_pretrained(folder, device=device, domain=domain, project=args.project,
                                          mirror=args.mirror)  # fmt: skip
    if predictor.actions:  # its forecasts depend on actions this rollout does not give
        raise UserError(f"{folder}: a predictor with actions ({', '.join(predictor.actions)}); score it against "
                        "its emulator with `semworld eval actions --weights ...`")  # fmt: skip
    kind = json.loads((folder / "config.json").read_text()).get("semworld_model")
    start = args.min_history if args.min_history is not None else min(predictor.T, DEFAULT_MIN_HISTORY)
    scores = score_predictor(predictor, clips, args.horizon, start)
    projection = predictor.projection
    out = {"weights": str(folder), "model": kind, "projection": projection is not None, "mirror": args.mirror}
    if projection is not None:  # the share of predicted states (all horizons) the projection changed
        scores["projected"] = _rate(
            [True] * projection.stats.projected
            + [False] * (projection.stats.states - projection.stats.projected)
        )
    return {**out, **scores}, score_predictor(CopyLast(), clips, args.horizon, start)
