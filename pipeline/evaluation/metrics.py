"""The metrics of every stage, one copy each: PSNR and SSIM of frames, exact match of states (overall and by
object count, or by field of a game), the captioner-free layout and shape checks of a drawn world frame,
`evaluate_frames`, which combines them (with the round trip through a captioner) for the renderer's trainer and
`semworld eval world`, `evaluate_screens`, its counterpart for a game's screens (objects found by colour), and
`scene_groups`, the object-count / screen / lamp groups the round trip is reported by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from pipeline.domain import Domain


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 images (or stacks) of the same shape."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


SSIM_SIGMA = 1.5
SSIM_WINDOW = 11  # torchmetrics' Gaussian window for sigma 1.5: int(3.5 * sigma + 0.5) * 2 + 1


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Structural similarity of two (H, W, 3) uint8 images: torchmetrics' Gaussian SSIM (11 x 11 window,
    sigma 1.5, K1 = 0.01, K2 = 0.03, data range 255), the mean over pixels and channels. The one SSIM of semworld:
    every figure in weights/README.md and docs/ is this function.

    The same arithmetic as torchmetrics' structural_similarity_index_measure (reflection padding, the five
    windowed moments, variances clamped at 0, the map's mean) in float64, with the Gaussian window applied as two
    1-D passes (11 + 11 taps instead of 121; the 2-D window is the outer product of the 1-D one, so the values
    agree to float64 rounding: tests compare the two). 16-27x faster on Atari screens (bench/ssim_speed.py), where a
    comparison scores thousands of pairs; a stack of pairs in one call would be slower per pair (memory-bound)."""
    import torch.nn.functional as F

    # A copy, so that read-only frames (decoded video, np.frombuffer) reach torch without its warning.
    x = torch.from_numpy(np.array(a, dtype=np.float64)).permute(2, 0, 1)[None]  # (1, C, H, W)
    y = torch.from_numpy(np.array(b, dtype=np.float64)).permute(2, 0, 1)[None]
    if x.shape != y.shape:
        raise ValueError(f"ssim of images of different shapes {tuple(a.shape)} and {tuple(b.shape)}")
    c = x.shape[1]
    pad = (SSIM_WINDOW - 1) // 2
    dist = torch.arange((1 - SSIM_WINDOW) / 2, (1 + SSIM_WINDOW) / 2, 1, dtype=torch.float64)
    gauss = torch.exp(-((dist / SSIM_SIGMA) ** 2) / 2)
    gauss = gauss / gauss.sum()  # (11,)
    rows = gauss.view(1, 1, -1, 1).expand(c, 1, -1, 1)  # (C, 1, 11, 1)
    cols = gauss.view(1, 1, 1, -1).expand(c, 1, 1, -1)  # (C, 1, 1, 11)
    x = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    y = F.pad(y, (pad, pad, pad, pad), mode="reflect")
    moments = torch.cat((x, y, x * x, y * y, x * y))  # (5, C, H + 2p, W + 2p)
    mu_x, mu_y, xx, yy, xy = F.conv2d(F.conv2d(moments, rows, groups=c), cols, groups=c)  # 5 x (C, H, W)
    c1, c2 = (0.01 * 255.0) ** 2, (0.03 * 255.0) ** 2
    var_x = torch.clamp(xx - mu_x**2, min=0.0)
    var_y = torch.clamp(yy - mu_y**2, min=0.0)
    cov = xy - mu_x * mu_y
    full = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return float(full.mean())


def layout_check(state: str, frame: np.ndarray, truth: np.ndarray | None = None) -> tuple[int, int, bool]:
    """Placement check without a captioner, from `world.parse_state`: returns (objects drawn in their cell with
    their colour, objects, whole frame right). An object's cell is right when the mean of its central patch is
    nearer to the object's palette colour than to any other colour or the room; every other cell (and the screen)
    must match the ground-truth frame's patch within 30 levels (which also checks the lamp's bulb)."""
    import world
    from world.render import BACKGROUND, BACKGROUND_LAMP_OFF, BACKGROUND_LAMP_ON, PALETTE

    scene = world.parse_state(state)
    size = frame.shape[0]
    truth = world.render_state(state, size=size) if truth is None else truth
    cell = size / world.GRID
    background = {None: BACKGROUND, True: BACKGROUND_LAMP_ON, False: BACKGROUND_LAMP_OFF}[scene.lamp]
    names = list(PALETTE) + ["background"]
    colours = np.array([PALETTE[c] for c in PALETTE] + [background], dtype=np.float64)  # (6, 3)
    wanted = {(o.row, o.col): o.colour for o in scene.objects}
    good, all_right = 0, True
    for r in range(world.GRID):
        for c in range(world.GRID):
            lo, hi = int((r + 0.35) * cell), int((r + 0.65) * cell) + 1
            le, ri = int((c + 0.35) * cell), int((c + 0.65) * cell) + 1
            mean = frame[lo:hi, le:ri].reshape(-1, 3).astype(np.float64).mean(0)
            if (r, c) in wanted:
                right = names[int(np.argmin(((colours - mean) ** 2).sum(1)))] == wanted[(r, c)]
                good += right
            else:
                expected = truth[lo:hi, le:ri].reshape(-1, 3).astype(np.float64).mean(0)
                right = bool(np.abs(mean - expected).mean() < 30)
            all_right &= right
    return good, len(scene.objects), bool(all_right)


def shape_check(state: str, frame: np.ndarray) -> list[bool]:
    """For each object of `state`: is the shape drawn in its cell nearer (mean absolute error over the cell) to
    the world's sprite of the right shape than to the other shapes in the same colour and place?"""
    import world
    from world.render import draw_frame

    scene = world.parse_state(state)
    size = frame.shape[0]
    edges = np.linspace(0, size, world.GRID + 1).round().astype(int)
    right = []
    for o in scene.objects:
        ys, xs = slice(edges[o.row], edges[o.row + 1]), slice(edges[o.col], edges[o.col + 1])
        patch = frame[ys, xs].astype(np.float64)
        errors = {
            shape: np.abs(draw_frame([(o.colour, shape, o.row, o.col)], scene.screen, scene.lamp, size)[ys, xs]
                          - patch).mean()
            for shape in world.SHAPES
        }  # fmt: skip
        right.append(min(errors, key=errors.__getitem__) == o.shape)
    return right


def evaluate_frames(
    states: Sequence[str], frames: Sequence[np.ndarray], captioner=None, by_objects: bool = False
) -> dict[str, float]:
    """PSNR/SSIM against the world's frames at the rendered size, the layout check and (with a captioner)
    the round trip: the fraction of frames the captioner reads back as exactly the requested state. With
    `by_objects`, also the round trip of each object count apart ("roundtrip_acc[objects=K]")."""
    import world

    size = frames[0].shape[0]
    truth = [world.render_state(s, size=size) for s in states]
    out: dict[str, float] = {
        "psnr": psnr(np.stack(truth), np.stack(frames)),  # from the mean squared error over all frames
        "ssim": float(np.mean([ssim(t, f) for t, f in zip(truth, frames)])),
    }
    checks = [layout_check(s, f, t) for s, f, t in zip(states, frames, truth)]
    out["object_cell_acc"] = sum(c[0] for c in checks) / max(1, sum(c[1] for c in checks))
    out["layout_acc"] = float(np.mean([c[2] for c in checks]))
    shapes = [shape_check(s, f) for s, f in zip(states, frames)]
    out["object_shape_acc"] = sum(sum(r) for r in shapes) / max(1, sum(len(r) for r in shapes))
    # The captioner-free proxy of the round trip: every cell right in colour, every object in its shape.
    out["frame_acc"] = float(np.mean([c[2] and all(r) for c, r in zip(checks, shapes)]))
    if captioner is not None:
        read = captioner.caption(list(frames))
        right = [r.strip() == s.strip() for r, s in zip(read, states)]
        out["roundtrip_acc"] = float(np.mean(right))
        if by_objects:
            for key, idx in scene_groups(states).items():
                if key.startswith("objects="):
                    out[f"roundtrip_acc[{key}]"] = float(np.mean([right[i] for i in idx]))
    return out


def caption_scores(domain: Domain, predicted: Sequence[str], states: Sequence[str]) -> dict[str, float]:
    """Exact match, and its break-down: by object count for the built-in world, else by field of the domain's
    parse ("field=ball x": the share of frames whose true state has that field and whose read gives it)."""
    if domain.name == "shapes":
        return exact_match(predicted, states)
    from pipeline.goals import state_fields

    hits: dict[str, list[bool]] = {}
    for p, s in zip(predicted, states):
        truth, read = state_fields(domain, s) or {}, state_fields(domain, p) or {}
        for name, value in truth.items():
            if value is not None:  # a field the true state has (no ball: no "ball x")
                hits.setdefault(f"field={name}", []).append(read.get(name, "missing") == value)
    exact = sum(p == s for p, s in zip(predicted, states)) / max(1, len(states))
    return {"exact_match": exact, **{k: sum(v) / len(v) for k, v in hits.items()}}


def position_errors(
    domain: Domain, frames: Sequence[np.ndarray], truth: Sequence[np.ndarray]
) -> dict[str, float]:
    """How far each object is drawn from where the true frame has it, measured from the pixels of both
    (`domain.locate`, frames of the truth's size): "position_px[ball]" the mean distance in screen pixels over
    the frames where both show it, "shown_acc[ball]" the share of frames that show it exactly when the truth
    does; "position_px" the mean over every object found in both."""
    locate = getattr(domain, "locate", None)
    if locate is None:
        return {}
    distances: dict[str, list[float]] = {}
    shown: dict[str, list[bool]] = {}
    for frame, true in zip(frames, truth):
        drawn, where = locate(frame), locate(true)
        if drawn is None or where is None:
            return {}
        for name, at in where.items():
            got = drawn.get(name)
            shown.setdefault(name, []).append((got is None) == (at is None))
            if got is not None and at is not None:
                distances.setdefault(name, []).append(math.hypot(got[0] - at[0], got[1] - at[1]))
    out = {f"position_px[{k}]": float(np.mean(v)) for k, v in distances.items()}
    out.update({f"shown_acc[{k}]": float(np.mean(v)) for k, v in shown.items()})
    every = [d for v in distances.values() for d in v]
    if every:
        out["position_px"] = float(np.mean(every))
    return out


def evaluate_screens(
    domain: Domain,
    states: Sequence[str],
    frames: Sequence[np.ndarray],
    truth: Sequence[np.ndarray],
    captioner=None,
) -> dict[str, float]:
    """A game renderer's frames of `states` against the recorded screens `truth` (frames are resized to the
    truth's size first): PSNR, SSIM, the objects' distances from their true places (`position_errors`) and,
    with a captioner, the round trip ("roundtrip_acc", and by field)."""
    size = truth[0].shape[:2]
    if frames[0].shape[:2] != size:
        from PIL import Image

        frames = [
            np.asarray(Image.fromarray(f).resize((size[1], size[0]), Image.Resampling.BICUBIC))
            for f in frames
        ]
    out: dict[str, float] = {
        "psnr": psnr(np.stack(truth), np.stack(frames)),
        "ssim": float(np.mean([ssim(t, f) for t, f in zip(truth, frames)])),
        **position_errors(domain, frames, truth),
    }
    if captioner is not None:
        read = captioner.caption(list(frames))
        scores = caption_scores(domain, [r.strip() for r in read], [s.strip() for s in states])
        out["roundtrip_acc"] = scores.pop("exact_match")
        out.update({f"roundtrip_{k}": v for k, v in scores.items()})
    return out


def exact_match(predicted: Sequence[str], states: Sequence[str]) -> dict[str, float]:
    """Overall exact match and exact match by number of objects in the true state (keys 'objects=K')."""
    from world.grammar import parse_state

    by_count: dict[int, list[bool]] = {}
    for p, s in zip(predicted, states):
        by_count.setdefault(len(parse_state(s).objects), []).append(p == s)
    hits = [h for v in by_count.values() for h in v]
    result = {"exact_match": sum(hits) / max(1, len(hits))}
    for k in sorted(by_count):
        result[f"objects={k}"] = sum(by_count[k]) / len(by_count[k])
    return result


def scene_groups(states: Sequence[str]) -> dict[str, list[int]]:
    """Indices of `states` by kind of world scene: "objects=K" for each object count, "screen" / "no screen",
    "lamp on" / "lamp off" / "no lamp" (a state that does not parse is in group "invalid" only)."""
    from world.grammar import parse_state

    groups: dict[str, list[int]] = {}
    for i, s in enumerate(states):
        try:
            scene = parse_state(s)
        except ValueError:
            groups.setdefault("invalid", []).append(i)
            continue
        lamp = "no lamp" if scene.lamp is None else "lamp on" if scene.lamp else "lamp off"
        for key in (f"objects={len(scene.objects)}", "screen" if scene.screen else "no screen", lamp):
            groups.setdefault(key, []).append(i)
    order = lambda k: (not k.startswith("objects="), k)  # noqa: E731 (object counts first)
    return {k: groups[k] for k in sorted(groups, key=order)}
