"""`semworld eval compare`: semworld against a pixel-space predictor on the same world clips.

From the same T context frames of each test clip, every method draws the next `horizon` frames: semworld
(caption -> predict -> render), semworld given the true states (predict -> render: the predictor's and the
renderer's share), the pixel baseline (models.pixel), copy-last-frame, and the truth drawn by the world. Each
predicted frame is read back by the shipped captioner and compared with the true state (exact match and per
object), and with the true frame in pixels (PSNR, SSIM, per-pixel MSE and MAE); by horizon and by family.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.domain import get_domain
from pipeline.evaluation.metrics import psnr, ssim
from pipeline.evaluation.world import Clip, family_of, read_png, read_world_dir, stage_folder
from pipeline.utils import UserError, canonical_state, resolve_device

logger = logging.getLogger(__name__)

METHODS = ("semworld", "semworld_true_states", "pixel", "copy_last", "truth")
LABELS = {
    "semworld": "semworld (caption -> predict -> render)",
    "semworld_true_states": "semworld, true states (predict -> render)",
    "pixel": "pixel predictor (SimVP-style)",
    "copy_last": "copy last frame",
    "truth": "ground truth rendered",
}
STATE_METRICS = ("exact", "object_acc", "cell_acc", "colour_acc", "shape_acc", "lost", "invented")
PIXEL_METRICS = ("psnr", "ssim", "mse", "mae")


# ---- reading a state back ------------------------------------------------------------------------------
def read_objects(state: str) -> set[tuple[str, str, int, int]] | None:
    """The (colour, shape, row, col) objects a state names, item by item (so that a caption with one bad item
    still counts its good ones); None when not a single item is well formed and the state is not "empty ."."""
    from world.grammar import COLOURS, COLUMNS, ROWS, SHAPES, tokenize

    tokens = tokenize(state)
    if tokens[:1] == ["empty"]:
        return set()
    objects: set[tuple[str, str, int, int]] = set()
    good = False
    for item in " ".join(tokens).replace(".", ",").split(","):
        words = item.split()
        if (
            len(words) == 4
            and words[0] in COLOURS
            and words[1] in SHAPES
            and words[2] in ROWS
            and words[3] in COLUMNS
        ):
            objects.add((words[0], words[1], ROWS.index(words[2]), COLUMNS.index(words[3])))
            good = True
        elif words in (["screen"], ["lamp", "on"], ["lamp", "off"]):
            good = True
    return objects if good else None


def object_scores(read: str, truth: str) -> dict[str, float]:
    """Per frame: the true objects read back exactly (object_acc), whose cell holds some read object (cell_acc),
    with the right colour / shape among those (colour_acc, shape_acc: None without such objects), whose identity
    is missing from the reading (lost), and read identities the truth does not have (invented, a count)."""
    true = read_objects(truth) or set()
    got = read_objects(read) or set()
    at = {(r, c): (col, shp) for col, shp, r, c in got}
    ids = {(col, shp) for col, shp, _, _ in got}
    true_ids = {(col, shp) for col, shp, _, _ in true}
    n = len(true)
    placed = [(o, at[(o[2], o[3])]) for o in true if (o[2], o[3]) in at]
    return {
        "objects": n,
        "object_hits": sum(o in got for o in true),
        "cell_hits": len(placed),
        "colour_hits": sum(o[0] == idn[0] for o, idn in placed),
        "shape_hits": sum(o[1] == idn[1] for o, idn in placed),
        "lost_count": sum((o[0], o[1]) not in ids for o in true),
        "invented_count": len(ids - true_ids),
    }


# ---- the methods ---------------------------------------------------------------------------------------
@dataclass
class Stages:
    """What the comparison runs: the shipped captioner, predictor and renderer, and the pixel predictor."""

    captioner: Any
    predictor: Any
    renderer: Any
    pixel: Any


def load_stages(weights: str | Path, pixel: str | Path, device: torch.device) -> Stages:
    from pipeline.captioner import Captioner
    from pipeline.pixel import PixelPredictor
    from pipeline.predictor import Predictor
    from pipeline.renderer import Renderer

    root = Path(weights)
    found = {s: stage_folder(root, s) for s in ("captioner", "predictor", "renderer")}
    missing = [s for s, f in found.items() if f is None]
    if missing:
        raise UserError(f"--weights {root}: no {', '.join(missing)} folder (expected {root}/<stage>/)")
    folders = {s: f for s, f in found.items() if f is not None}
    return Stages(
        Captioner.from_pretrained(folders["captioner"], device=device, domain=get_domain("shapes")),
        Predictor.from_pretrained(folders["predictor"], device=device),
        Renderer.from_pretrained(folders["renderer"], device=device),
        PixelPredictor.from_pretrained(pixel, device=device),
    )


def _fit(frame: np.ndarray, side: int) -> np.ndarray:
    """A frame at side x side (bicubic resize when a stage draws at another size)."""
    if frame.shape[0] == side and frame.shape[1] == side:
        return frame
    from PIL import Image

    return np.asarray(Image.fromarray(frame).resize((side, side), Image.Resampling.BICUBIC))


def run_methods(
    stages: Stages,
    contexts: list[list[np.ndarray]],
    histories: list[list[str]],
    futures: list[list[str]],
    horizon: int,
    seed: int,
    steps: int | None,
    batch_size: int = 8,
    cache: Path | None = None,
    cache_key: dict[str, Any] | None = None,
) -> tuple[dict[str, list[list[np.ndarray]]], dict[str, list[list[str]]], dict[str, float]]:
    """Every method's frames (clip, h) at the context's size, the states semworld predicted, and the seconds per
    predicted frame of each method (its whole path from the context frames, or states for the true-state one).

    cache: a folder where the methods that do not depend on the pixel model (all but "pixel") keep their frames,
    states and timing, reused when `cache_key` (data, clips, horizon, seed, steps, weights) is the same, so that
    a retrained pixel model is compared without rendering semworld's frames again."""
    side = contexts[0][0].shape[0]
    n = len(contexts)
    frames: dict[str, list[list[np.ndarray]]] = {}
    states: dict[str, list[list[str]]] = {}
    seconds: dict[str, float] = {}

    def render(predicted: list[list[str]]) -> list[list[np.ndarray]]:
        generator = torch.Generator("cpu").manual_seed(seed)
        flat = [s for clip in predicted for s in clip]
        drawn: list[np.ndarray] = []
        for i in range(0, len(flat), batch_size):
            drawn += stages.renderer.render(flat[i : i + batch_size], generator=generator, steps=steps)
        drawn = [_fit(np.asarray(f, dtype=np.uint8), side) for f in drawn]
        return [drawn[i * horizon : (i + 1) * horizon] for i in range(n)]

    def timed(name: str, fn: Callable[[], list[list[np.ndarray]]]) -> None:
        stored = cache / f"{name}.npz" if cache is not None and name != "pixel" else None
        cached = _load_cached(stored, cache_key) if stored is not None else None
        if cached is not None:
            frames[name], seconds[name], kept = cached
            if kept is not None:
                states[name] = kept
            logger.info("%s: frames from %s", name, stored)
            return
        t0 = time.perf_counter()
        frames[name] = fn()
        seconds[name] = (time.perf_counter() - t0) / (n * horizon)
        if stored is not None:
            _save_cached(stored, cache_key, frames[name], states.get(name), seconds[name])

    def semworld() -> list[list[np.ndarray]]:
        read = caption_all(stages.captioner, [f for ctx in contexts for f in ctx])
        t = len(contexts[0])
        histories_read = [read[i * t : (i + 1) * t] for i in range(n)]
        states["semworld"] = stages.predictor.predict(histories_read, horizon, truncate=True)
        return render(states["semworld"])

    def semworld_true() -> list[list[np.ndarray]]:
        states["semworld_true_states"] = stages.predictor.predict(histories, horizon, truncate=True)
        return render(states["semworld_true_states"])

    def pixel() -> list[list[np.ndarray]]:
        own = [
            ctx[-stages.pixel.context :] for ctx in contexts
        ]  # what the pixel model reads: the last frames
        out: list[list[np.ndarray]] = []
        for i in range(0, n, batch_size):
            out += stages.pixel.predict_frames(own[i : i + batch_size], horizon)
        return out

    def truth() -> list[list[np.ndarray]]:
        from world import render_state

        return [[render_state(s, size=side) for s in future] for future in futures]

    timed("semworld", semworld)
    timed("semworld_true_states", semworld_true)
    timed("pixel", pixel)
    timed("copy_last", lambda: [[ctx[-1].copy() for _ in range(horizon)] for ctx in contexts])
    timed("truth", truth)
    return frames, states, seconds


def _load_cached(
    stored: Path, key: dict[str, Any] | None
) -> tuple[list[list[np.ndarray]], float, list[list[str]] | None] | None:
    """One method's frames, seconds per frame and states (None: it keeps none) from `stored`; None when there is
    no such file or it was written for another `key`."""
    if not stored.is_file():
        return None
    with np.load(stored, allow_pickle=False) as z:
        if json.loads(str(z["key"])) != key:
            return None
        states = json.loads(str(z["states"])) if "states" in z.files else None
        return [list(clip) for clip in z["frames"]], float(z["seconds"]), states


def _save_cached(
    stored: Path,
    key: dict[str, Any] | None,
    frames: list[list[np.ndarray]],
    states: list[list[str]] | None,
    seconds: float,
) -> None:
    """One method's frames, seconds and states (None: a method that predicts none) in `stored`, under `key`."""
    stored.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {
        "frames": np.asarray(frames),
        "seconds": np.asarray(seconds),
        "key": np.asarray(json.dumps(key)),
    }
    if states is not None:
        arrays["states"] = np.asarray(json.dumps(states))
    np.savez(stored, **arrays)


def caption_all(captioner: Any, frames: Sequence[np.ndarray], batch_size: int = 64) -> list[str]:
    out: list[str] = []
    for i in range(0, len(frames), batch_size):
        out += captioner.caption(list(frames[i : i + batch_size]))
    return out


# ---- scoring -------------------------------------------------------------------------------------------
def _summarise(rows: list[dict[str, Any]], pairs: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """Means over rows of one (method, horizon[, family]) cell; PSNR (metrics.psnr) from the mean squared error
    over the cell's (true, predicted) frame pairs, None when they are identical."""
    if not rows:
        return {}
    total = sum(r["objects"] for r in rows)
    placed = sum(r["cell_hits"] for r in rows)
    value = psnr(np.stack([t for t, _ in pairs]), np.stack([p for _, p in pairs]))
    return {
        "n": len(rows),
        "exact": round(float(np.mean([r["exact"] for r in rows])), 4),
        "object_acc": round(sum(r["object_hits"] for r in rows) / total, 4) if total else None,
        "cell_acc": round(placed / total, 4) if total else None,
        "colour_acc": round(sum(r["colour_hits"] for r in rows) / placed, 4) if placed else None,
        "shape_acc": round(sum(r["shape_hits"] for r in rows) / placed, 4) if placed else None,
        "lost": round(sum(r["lost_count"] for r in rows) / total, 4) if total else None,
        "invented": round(float(np.mean([r["invented_count"] for r in rows])), 4),
        "psnr": None if math.isinf(value) else round(value, 3),
        "ssim": round(float(np.mean([r["ssim"] for r in rows])), 4),
        "mse": round(float(np.mean([r["mse"] for r in rows])), 6),
        "mae": round(float(np.mean([r["mae"] for r in rows])), 6),
    }


def score_frames(
    captioner: Any,
    frames: dict[str, list[list[np.ndarray]]],
    truth_frames: list[list[np.ndarray]],
    futures: list[list[str]],
    families: list[str],
) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """{method: {"by_horizon": {h: cell}, "by_family": {family: {h: cell}}, "all": cell}} and what the captioner
    read in each method's frames. MSE and MAE are per pixel and channel on values in [0, 1]."""
    result: dict[str, Any] = {}
    readings: dict[str, list[list[str]]] = {}
    horizon = len(futures[0])
    for method, clips in frames.items():
        read = caption_all(captioner, [f for clip in clips for f in clip])
        readings[method] = [read[i * horizon : (i + 1) * horizon] for i in range(len(clips))]
        rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
        pairs: dict[tuple[str, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        for i, clip in enumerate(clips):
            for h, frame in enumerate(clip, start=1):
                true_state, true_frame = futures[i][h - 1], truth_frames[i][h - 1]
                reading = readings[method][i][h - 1]
                diff = frame.astype(np.float64) - true_frame.astype(np.float64)
                row = {
                    "exact": canonical_state(reading) == canonical_state(true_state),
                    **object_scores(canonical_state(reading), true_state),
                    "mse": float(np.mean((diff / 255.0) ** 2)),
                    "mae": float(np.mean(np.abs(diff) / 255.0)),
                    "ssim": ssim(true_frame, frame),
                }
                for key in (("all", h), (families[i], h), ("all", 0)):
                    rows.setdefault(key, []).append(row)
                    pairs.setdefault(key, []).append((true_frame, frame))
        result[method] = {
            "all": _summarise(rows[("all", 0)], pairs[("all", 0)]),
            "by_horizon": {
                str(h): _summarise(rows[("all", h)], pairs[("all", h)]) for h in range(1, horizon + 1)
            },
            "by_family": {
                fam: {
                    str(h): _summarise(rows.get((fam, h), []), pairs.get((fam, h), []))
                    for h in range(1, horizon + 1)
                }
                for fam in sorted(set(families))
            },
        }
    return result, readings


# ---- figures -------------------------------------------------------------------------------------------
def plot_horizon(result: dict[str, Any], path: Path) -> Path:
    """Exact match, object accuracy, PSNR and SSIM against horizon, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("exact", "state exact match (captioned)"), ("object_acc", "objects read back exactly"),
              ("psnr", "PSNR (dB)"), ("ssim", "SSIM"))  # fmt: skip
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), dpi=110)
    horizon = len(next(iter(result["methods"].values()))["by_horizon"])
    hs = list(range(1, horizon + 1))
    for ax, (key, title) in zip(axes.flat, panels):
        for method in METHODS:
            res = result["methods"].get(method)
            if res is None or (method == "truth" and key in ("psnr", "ssim")):
                continue
            values = [res["by_horizon"][str(h)].get(key) for h in hs]
            values = [np.nan if v is None else v for v in values]
            ax.plot(hs, values, marker="o", ms=3, label=LABELS[method], ls="--" if method == "truth" else "-")
        ax.set_title(title)
        ax.set_xlabel("horizon (states ahead)")
        ax.set_xticks(hs)
        ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"semworld vs pixel predictor, {result['clips']} test clips")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def frame_grid(
    frames: dict[str, list[list[np.ndarray]]],
    contexts: list[list[np.ndarray]],
    clips: Sequence[int],
    path: Path,
    scenarios: Sequence[str],
) -> Path:
    """For each clip in `clips`: rows true / semworld / pixel / copy-last, the T context frames then the
    predicted ones (context columns repeat the observed frames, dimmed in the predicted rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ("truth", "semworld", "pixel", "copy_last")
    names = {"truth": "true", "semworld": "semworld", "pixel": "pixel", "copy_last": "copy-last"}
    t, horizon = len(contexts[0]), len(frames["truth"][0])
    side = contexts[0][0].shape[0]
    gap = np.full((side, side // 8, 3), 255, np.uint8)
    fig, axes = plt.subplots(len(clips) * len(rows), 1, figsize=(1.1 * (t + horizon) + 1, 1.25 * len(rows) * len(clips)),
                             dpi=100, squeeze=False)  # fmt: skip
    for ci, clip in enumerate(clips):
        for ri, method in enumerate(rows):
            ctx = [
                f if method == "truth" else (f * 0.35 + 255 * 0.65).astype(np.uint8) for f in contexts[clip]
            ]
            strip = np.concatenate([*ctx, gap, *frames[method][clip]], axis=1)
            ax = axes[ci * len(rows) + ri, 0]
            ax.imshow(strip)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_ylabel(names[method], rotation=0, ha="right", va="center", fontsize=8)
            if ri == 0:
                ax.set_title(
                    f"test clip {clip} ({scenarios[ci]}): {t} context frames | h = 1..{horizon}", fontsize=8
                )
    fig.tight_layout(h_pad=0.2)
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- the whole comparison ------------------------------------------------------------------------------
@dataclass
class CompareArgs:
    """What `semworld eval compare` runs. data: a `world generate` directory (the test split, with PNG frames and
    at least T + horizon states per clip). weights: the semworld weights folder. pixel: a saved pixel model (or
    a `semworld train pixel` run folder). clips: use the first this many usable clips (None: all). horizon:
    frames predicted. steps: renderer denoising steps (None: its own). seed: renderer noise. figures: folder
    for the two PNGs (None: none). prefix: their file-name prefix. grid_clips: clips in the frame grid.
    cache: folder keeping the frames of the methods that do not depend on the pixel model (see run_methods).
    context: the states (frames) before the first forecast step, the same for every method (None: the pixel
    model's context; at least that). Each method reads what it needs of them: the pixel model its last frames,
    the predictor all of them (a history shorter than its window is front-padded, as it was trained to read)."""

    data: str
    weights: str = "weights"
    pixel: str = "runs/pixel/main/model"
    clips: int | None = None
    horizon: int = 8
    steps: int | None = None
    seed: int = 0
    figures: str | None = None
    prefix: str = "semantic_vs_pixel"
    grid_clips: int = 3
    cache: str | None = None
    device: str = "cpu"
    threads: int | None = None
    context: int | None = None

    def __post_init__(self) -> None:
        if self.context is not None and self.context < 1:
            raise UserError(f"--context must be >= 1, got {self.context}")
        if self.horizon < 1 or (self.clips is not None and self.clips < 1) or self.grid_clips < 0:
            raise UserError(
                f"--horizon and --clips must be >= 1 and --grid-clips >= 0, got {self.horizon}, {self.clips}, "
                f"{self.grid_clips}"
            )


def usable_clips(clips: Sequence[Clip], context: int, horizon: int) -> list[Clip]:
    return [c for c in clips if c.frames_dir is not None and len(c.states) >= context + horizon]


def compare(args: CompareArgs) -> dict[str, Any]:
    """Run every method on the data's clips and score them; writes the figures when args.figures is set."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    stages = load_stages(args.weights, args.pixel, device)
    # Every forecast starts at the same step t; each method reads what it needs of the t frames before it: the
    # pixel model its last frames, the predictor all t states (front-padded when fewer than its window).
    t = args.context or stages.pixel.context
    if t < stages.pixel.context:
        raise UserError(
            f"--context {t}: the pixel model reads {stages.pixel.context} frames; give at least that"
        )
    clips = usable_clips(read_world_dir(args.data), t, args.horizon)
    if not clips:
        raise UserError(f"--data {args.data}: no clip with PNG frames and >= {t + args.horizon} states "
                        f"(write it with `semworld world generate --length {t + args.horizon}`)")  # fmt: skip
    clips = clips[: args.clips] if args.clips is not None else clips
    contexts = [[read_png(c.frames_dir / f"{k:02d}.png") for k in range(t)] for c in clips]  # type: ignore[operator]
    truth_frames = [[read_png(c.frames_dir / f"{k:02d}.png") for k in range(t, t + args.horizon)]  # type: ignore[operator]
                    for c in clips]  # fmt: skip
    histories = [c.states[:t] for c in clips]
    futures = [c.states[t : t + args.horizon] for c in clips]
    families = [family_of(c.scenario) for c in clips]
    logger.info("comparing on %d clips (T = %d, horizon %d)", len(clips), t, args.horizon)
    key = {"data": str(Path(args.data).resolve()), "clips": [c.index for c in clips], "horizon": args.horizon,
           "seed": args.seed, "steps": args.steps, "weights": str(Path(args.weights).resolve())}  # fmt: skip
    cache = Path(args.cache) if args.cache else None
    frames, predicted, seconds = run_methods(
        stages, contexts, histories, futures, args.horizon, args.seed, args.steps, cache=cache, cache_key=key
    )
    scores, readings = score_frames(stages.captioner, frames, truth_frames, futures, families)
    state_exact = {
        name: {str(h): round(float(np.mean([canonical_state(p[h - 1]) == canonical_state(f[h - 1])
                                             for p, f in zip(predicted[name], futures)])), 4)
               for h in range(1, args.horizon + 1)}
        for name in predicted
    }  # fmt: skip
    count_families: dict[str, int] = {}
    for f in families:
        count_families[f] = count_families.get(f, 0) + 1
    result: dict[str, Any] = {
        "data": str(args.data), "weights": str(args.weights), "pixel": str(args.pixel), "clips": len(clips),
        "families": count_families, "context": t, "predictor_window": stages.predictor.T,
        "pixel_context": stages.pixel.context, "horizon": args.horizon, "args": asdict(args),
        "methods": scores, "seconds_per_frame": {k: round(v, 4) for k, v in seconds.items()},
        "predicted_state_exact": state_exact,
        "pixel_parameters": sum(p.numel() for p in stages.pixel.model.parameters()),
    }  # fmt: skip
    if args.figures:
        out = Path(args.figures)
        out.mkdir(parents=True, exist_ok=True)
        result["figures"] = [str(plot_horizon(result, out / f"{args.prefix}_horizon.png"))]
        if args.grid_clips:
            picks = _grid_picks(families, args.grid_clips)
            result["figures"].append(str(frame_grid(frames, contexts, picks, out / f"{args.prefix}_frames.png",
                                                    [clips[i].scenario for i in picks])))  # fmt: skip
    return result


def _grid_picks(families: Sequence[str], n: int) -> list[int]:
    """Up to n clip indices, one per family first (physics, memory, stochastic), then in order."""
    picks: list[int] = []
    for fam in ("physics", "memory", "stochastic"):
        if fam in families and len(picks) < n:
            picks.append(families.index(fam))
    picks += [i for i in range(len(families)) if i not in picks][: n - len(picks)]
    return picks


def markdown_tables(result: dict[str, Any]) -> str:
    """The result as Markdown: one table per measure (methods x horizons + all), exact match by family, timing."""
    h = result["horizon"]
    head = "| method | " + " | ".join(f"h={k}" for k in range(1, h + 1)) + " | all |\n"
    rule = "|---" * (h + 2) + "|\n"

    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    parts = []
    for key, title in (("exact", "State exact match of the frames (read back by the shipped captioner)"),
                       ("object_acc", "Objects read back exactly (cell, colour and shape)"),
                       ("cell_acc", "True objects whose cell holds a read object"),
                       ("lost", "True objects lost (identity not read anywhere)"),
                       ("invented", "Objects invented per frame"), ("psnr", "PSNR (dB)"), ("ssim", "SSIM"),
                       ("mse", "MSE per pixel and channel (values in [0, 1])"),
                       ("mae", "MAE per pixel and channel (values in [0, 1])")):  # fmt: skip
        rows = [f"| {m} | " + " | ".join(cell(result["methods"][m]["by_horizon"][str(k)].get(key))
                                         for k in range(1, h + 1)) + f" | {cell(result['methods'][m]['all'].get(key))} |"
                for m in METHODS]  # fmt: skip
        parts.append(f"**{title}**\n\n" + head + rule + "\n".join(rows) + "\n")
    families = sorted(next(iter(result["methods"].values()))["by_family"])
    for fam in families:
        rows = []
        for m in METHODS:
            row = result["methods"][m]["by_family"][fam]
            rows.append(
                f"| {m} | " + " | ".join(cell(row[str(k)].get("exact")) for k in range(1, h + 1)) + " | |"
            )
        n = next(iter(result["methods"].values()))["by_family"][fam]["1"].get("n", 0)
        parts.append(f"**State exact match, {fam} ({n} clips)**\n\n" + head + rule + "\n".join(rows) + "\n")
    timing = " | ".join(f"{m} {result['seconds_per_frame'][m]:.4f}" for m in METHODS)
    parts.append(f"**Seconds per predicted frame**: {timing}\n")
    return "\n".join(parts)
