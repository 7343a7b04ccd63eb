"""`semworld eval compare --domain GAME`: semworld against an action-conditioned pixel predictor on a game's
held-out episodes, frames in and frames out, checked against the emulator.

Each test episode of the game's simulator gives T context screens (passed through H.264 and back, as a user's clip
would be), the actions taken between them, and then, from the same saved emulator state, the true future under
the logged actions and under each action held throughout ("all up", "all down", "all stay"). From the same context
and the same future actions every method draws the next `horizon` frames:

    semworld              the captioner reads the context, the predictor forecasts under the actions, the renderer
                          draws the forecast
    semworld_true_states  the predictor reads the true states (RAM) instead: the predictor's and the renderer's share
    pixel                 the pixel model (models.pixel) reads the last context screens and the actions
    copy_last             the last context screen, held

Every drawn frame is read back by the weights' captioner and compared with the emulator's state (exact match), the
objects are found in its pixels and in the true screen's (`Domain.locate`: distance in screen pixels), and it is
compared with the true screen in pixels (PSNR, SSIM); by horizon h = 1..H. Under the held actions, the controlled
object (Pong's paddle) must move as the emulator's does: the rate at which the read-back state has it on the same
side of its last context position as the truth (`actions.score_counterfactuals`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.evaluation.actions import Episode, record_episodes, score_counterfactuals
from pipeline.evaluation.metrics import psnr, ssim

logger = logging.getLogger(__name__)

METHODS = ("semworld", "semworld_true_states", "pixel", "copy_last")
LABELS = {
    "semworld": "semworld (caption -> predict -> render)",
    "semworld_true_states": "semworld, true states (predict -> render)",
    "pixel": "pixel predictor (SimVP-style, action-conditioned)",
    "copy_last": "copy last frame",
}


ScreenEpisode = Episode  # recorded with screens: context holds a clip of the history's screens


def as_clip(screens: Sequence[np.ndarray], fps: float) -> list[np.ndarray]:
    """The screens after an H.264 round trip: what a clip of them holds."""
    from pipeline.video import encode_mp4, read_video

    return read_video(encode_mp4(list(screens), fps)).frames[: len(screens)]


def record_screen_episodes(
    domain: Any, n: int, T: int, horizon: int, seed: int = 0, sticky: float = 0.0
) -> list[ScreenEpisode]:
    """n test episodes of `domain.simulator` with their screens (actions.record_episodes), the context's passed
    through H.264 as a user's clip would be."""
    episodes = record_episodes(domain, n, T, horizon, seed=seed, sticky=sticky, screens=True, variants=0)
    for ep in episodes:
        ep.context = as_clip(ep.context, domain.state_rate)
    return episodes


# ---- the methods ---------------------------------------------------------------------------------------
def _in_batches(fn: Any, items: Sequence[Any], batch: int) -> list[Any]:
    return [out for i in range(0, len(items), batch) for out in fn(list(items[i : i + batch]))]


def _forecast_frames(
    predictor: Any,
    renderer: Any,
    histories: list[list[str]],
    actions: list[list[str | None]],
    horizon: int,
    seed: int,
) -> list[list[np.ndarray]]:
    """Each history's forecast under its actions, drawn: (episodes, horizon) frames."""
    states = predictor.predict_under(histories, horizon, actions)[0]  # (episodes, horizon) states
    flat = [s for row in states for s in row]
    generator = torch.Generator("cpu").manual_seed(seed)
    frames = _in_batches(lambda part: renderer.render(part, generator=generator), flat, 64)
    return [frames[i * horizon : (i + 1) * horizon] for i in range(len(histories))]


def method_frames(
    stages: Any, episodes: Sequence[ScreenEpisode], name: str, horizon: int, seed: int = 0
) -> dict[str, list[list[np.ndarray]]]:
    """Every method's drawn future of every episode under action sequence `name`: method -> (episodes, horizon)."""
    future = [list(ep.futures[name][0]) for ep in episodes]
    actions = [
        list[str | None]([*ep.actions, *f][: len(ep.history) + horizon - 1])
        for ep, f in zip(episodes, future)
    ]
    read = _in_batches(stages.captioner.caption, [f for ep in episodes for f in ep.context], 256)
    T = len(episodes[0].history)
    read_histories = [read[i * T : (i + 1) * T] for i in range(len(episodes))]
    out = {
        "semworld": _forecast_frames(
            stages.predictor, stages.renderer, read_histories, actions, horizon, seed
        ),
        "semworld_true_states": _forecast_frames(
            stages.predictor, stages.renderer, [ep.history for ep in episodes], actions, horizon, seed
        ),  # fmt: skip
        "copy_last": [[ep.context[-1]] * horizon for ep in episodes],
    }
    if stages.pixel is not None:
        out["pixel"] = stages.pixel.predict_frames([ep.context for ep in episodes], horizon, future)
    return out


# ---- scoring -------------------------------------------------------------------------------------------
def score_frames(
    domain: Any,
    captioner: Any,
    episodes: Sequence[ScreenEpisode],
    name: str,
    frames: Sequence[Sequence[np.ndarray]],
) -> tuple[dict[str, list[float]], list[list[str]]]:
    """By horizon: exact match of the frames read back, the objects' distance from their true places in pixels
    (mean over the objects found in both), the share of objects shown where the truth shows one and hidden where
    it does not, PSNR and SSIM against the true screens. Also the read-back states (episodes, horizon)."""
    H = len(frames[0])
    flat = [f for row in frames for f in row]
    read_flat = _in_batches(captioner.caption, flat, 256)
    read = [read_flat[i * H : (i + 1) * H] for i in range(len(episodes))]
    exact, dist, shown, ps, ss = (np.zeros(H) for _ in range(5))
    n_dist, n_shown = np.zeros(H), np.zeros(H)
    for ep, row, got in zip(episodes, frames, read):
        _, states, truth = ep.futures[name]
        for h in range(H):
            exact[h] += domain.spell(got[h]) == domain.spell(states[h])
            drawn, where = domain.locate(row[h]), domain.locate(truth[h])
            for obj, at in where.items():
                n_shown[h] += 1
                shown[h] += (drawn[obj] is None) == (at is None)
                if at is not None and drawn[obj] is not None:
                    dist[h] += float(np.hypot(drawn[obj][0] - at[0], drawn[obj][1] - at[1]))
                    n_dist[h] += 1
            ps[h] += psnr(truth[h], row[h])
            ss[h] += ssim(truth[h], row[h])
    n = len(episodes)
    scores = {
        "exact": (exact / n).round(4).tolist(),
        "position_px": (dist / np.maximum(n_dist, 1)).round(3).tolist(),
        "shown": (shown / np.maximum(n_shown, 1)).round(4).tolist(),
        "psnr": (ps / n).round(3).tolist(),
        "ssim": (ss / n).round(4).tolist(),
    }
    return scores, read


@dataclass
class GameStages:
    """What the comparison runs: the weights' captioner, predictor (with actions) and renderer, and the pixel
    predictor (None: semworld and copy-last alone)."""

    captioner: Any
    predictor: Any
    renderer: Any
    pixel: Any = None


def load_game_stages(
    weights: str | Path, pixel: str | Path | None, domain: Any, device: str = "cpu"
) -> GameStages:
    from pipeline.captioner import Captioner
    from pipeline.pixel import PixelPredictor
    from pipeline.predictor import Predictor
    from pipeline.renderer import Renderer
    from pipeline.utils import UserError

    root = Path(weights)
    missing = [s for s in ("captioner", "predictor", "renderer") if not (root / s).is_dir()]
    if missing:
        raise UserError(f"--weights {root}: no {', '.join(missing)} folder (a game's stack has all three)")
    stages = GameStages(
        Captioner.from_pretrained(root / "captioner", device=device, domain=domain),
        Predictor.from_pretrained(root / "predictor", device=device),
        Renderer.from_pretrained(root / "renderer", device=device),
        PixelPredictor.from_pretrained(pixel, device=device) if pixel else None,
    )
    if not getattr(stages.predictor, "actions", None):
        raise UserError(
            f"--weights {root}: its predictor forecasts from states alone; this comparison is under actions"
        )
    if stages.pixel is not None and tuple(stages.pixel.actions) != tuple(domain.actions):
        raise UserError(
            f"--pixel {pixel}: its action words {stages.pixel.actions} are not {domain.name}'s {domain.actions}"
        )
    return stages


def compare_game(
    stages: GameStages,
    domain: Any,
    episodes: int = 48,
    horizon: int = 16,
    seed: int = 0,
    sticky: float = 0.0,
    render_seed: int = 0,
) -> tuple[dict[str, Any], list[ScreenEpisode], dict[str, dict[str, list[list[np.ndarray]]]]]:
    """The whole comparison: (result, the episodes, the frames of every sequence and method) — the last two for
    the figures."""
    T = stages.predictor.T
    t0 = time.perf_counter()
    eps = record_screen_episodes(domain, episodes, T, horizon, seed=seed, sticky=sticky)
    logger.info(
        "compare: %d %s episodes of %d context screens in %.1f s",
        len(eps),
        domain.name,
        T,
        time.perf_counter() - t0,
    )
    frames: dict[str, dict[str, list[list[np.ndarray]]]] = {}
    result: dict[str, Any] = {"domain": domain.name, "episodes": len(eps), "horizon": horizon, "context": T,
                              "pixel_context": stages.pixel.context if stages.pixel else None, "seed": seed,
                              "sticky": sticky, "controlled": domain.controlled,
                              "controlled_noun": getattr(domain, "controlled_noun", domain.controlled),
                              "logged": {}, "counterfactual": {}}  # fmt: skip
    for name in eps[0].futures:
        t1 = time.perf_counter()
        frames[name] = method_frames(stages, eps, name, horizon, render_seed)
        for method, drawn in frames[name].items():
            scores, read = score_frames(domain, stages.captioner, eps, name, drawn)
            if name == "logged":
                result["logged"][method] = scores
            else:
                moved = score_counterfactuals(domain, eps, {name: read})[name]  # type: ignore[arg-type]
                result["counterfactual"].setdefault(method, {})[name] = {**scores, **moved}
        logger.info("compare: %s done in %.1f s", name, time.perf_counter() - t1)
    result["summary"] = summarise(result)
    return result, eps, frames


def summarise(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per method: each logged measure averaged over h = 1..H and over h >= 4, and the counterfactual direction and
    exact rates averaged over the held actions and the horizons."""
    out: dict[str, dict[str, float]] = {}
    for method, scores in result["logged"].items():
        row = {f"{k}_mean": round(float(np.mean(v)), 4) for k, v in scores.items()}
        row.update({f"{k}_h4+": round(float(np.mean(v[3:])), 4) for k, v in scores.items() if len(v) > 3})
        held = result["counterfactual"].get(method, {})
        if held:
            row["counterfactual_direction"] = round(
                float(np.mean([s["controlled_direction"] for s in held.values()])), 4
            )
            row["counterfactual_exact"] = round(float(np.mean([s["exact"] for s in held.values()])), 4)
        out[method] = row
    return out


# ---- figures -------------------------------------------------------------------------------------------
def plot_game_horizons(result: dict[str, Any], path: str | Path) -> Path:
    """Exact match of the read-back frames, object distance in pixels and the counterfactual direction rate by
    horizon, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), dpi=110)
    hs = np.arange(1, result["horizon"] + 1)
    for method, scores in result["logged"].items():
        axes[0].plot(hs, scores["exact"], marker="o", ms=3, label=LABELS[method])
        axes[1].plot(hs, scores["position_px"], marker="o", ms=3, label=LABELS[method])
        held = result["counterfactual"].get(method, {})
        if held:
            axes[2].plot(
                hs, np.mean([s["controlled_direction"] for s in held.values()], axis=0), marker="o", ms=3
            )
    titles = ("state exact match of the drawn frame, read back", "objects' distance from the truth (pixels)",
              f"held actions: the {result['controlled_noun']} moves as in the emulator")  # fmt: skip
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("horizon h (steps of 4 frames)")
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 1)
    axes[2].set_ylim(0, 1)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"{result['domain']}: {result['episodes']} held-out episodes, context {result['context']} states"
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def frame_grid(
    eps: Sequence[ScreenEpisode],
    frames: dict[str, list[list[np.ndarray]]],
    path: str | Path,
    episode: int = 0,
    horizons: Sequence[int] = (1, 2, 4, 8, 16),
) -> Path:
    """A PNG: one row per method (the truth first), one column per horizon, of one episode's logged future."""
    from PIL import Image, ImageDraw

    ep = eps[episode]
    truth = ep.futures["logged"][2]
    hs = [h for h in horizons if h <= len(truth)]
    rows = [("truth", truth), *((m, frames[m][episode]) for m in METHODS if m in frames)]
    h, w = truth[0].shape[:2]
    label, pad = 150, 4
    grid = Image.new("RGB", (label + len(hs) * (w + pad), 18 + len(rows) * (h + pad)), "white")
    draw = ImageDraw.Draw(grid)
    for j, hz in enumerate(hs):
        draw.text((label + j * (w + pad) + 4, 3), f"h = {hz}", fill="black")
    for i, (name, row) in enumerate(rows):
        y = 18 + i * (h + pad)
        draw.text((4, y + h // 2), name.replace("_", " "), fill="black")
        for j, hz in enumerate(hs):
            grid.paste(Image.fromarray(row[hz - 1]), (label + j * (w + pad), y))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    grid.save(path)
    return path
