"""Pixels of the built-in world: flat anti-aliased shapes on a plain background, a lamp and a screen.

`draw_frame` takes objects at real-valued grid positions (the simulator's in-between frames use it too), so a
frame at a state instant and `render_state(caption)` go through the same code and give the same pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from world.grammar import COLOURS, GRID, SCREEN_COLUMN, SHAPES, Scene, parse_state

# Flat palette (RGB). Yellow is kept for the lamp, so no object is yellow.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (226, 72, 76),
    "orange": (243, 146, 44),
    "green": (62, 170, 92),
    "blue": (58, 124, 216),
    "purple": (142, 92, 196),
}
BACKGROUND = (236, 239, 243)  # no lamp in the scene
BACKGROUND_LAMP_OFF = (200, 205, 215)  # the room is dim
BACKGROUND_LAMP_ON = (252, 243, 212)  # warm light
BULB_ON = (255, 206, 48)
BULB_OFF = (150, 156, 168)
SCREEN_FILL = (77, 86, 104)
SCREEN_EDGE = (58, 65, 82)
OBJECT_SCALE = 0.8  # sprite side as a fraction of a cell; the screen (one cell wide) hides it fully
SUPERSAMPLE = 4
MIN_SIZE = 32

# (colour, shape, row, col): row and col are grid coordinates, real-valued between state instants.
Placed = tuple[str, str, float, float]


def _check_size(size: int) -> None:
    if not isinstance(size, int) or size < MIN_SIZE:
        raise ValueError(f"size must be an int >= {MIN_SIZE}, got {size!r}")


@lru_cache(maxsize=64)
def _sprite(colour: str, shape: str, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Premultiplied colour (side, side, 3) and coverage (side, side, 1) of one shape, float32 in [0, 255]/[0, 1]."""
    big = side * SUPERSAMPLE
    border = max(1.0, big * 0.07)

    def mask(inset: float) -> np.ndarray:
        img = Image.new("L", (big, big), 0)
        d = ImageDraw.Draw(img)
        lo, hi = inset, big - 1 - inset
        mid = (big - 1) / 2
        if shape == "ball":
            d.ellipse([lo, lo, hi, hi], fill=255)
        elif shape == "box":
            pad = big * 0.06  # a square looks bigger than a disc of the same width
            d.rounded_rectangle([lo + pad, lo + pad, hi - pad, hi - pad], radius=big * 0.1, fill=255)
        elif shape == "triangle":
            top = lo + (big * 0.04 if inset == 0 else inset * 0.6)
            d.polygon([(mid, top), (hi, hi - big * 0.06), (lo, hi - big * 0.06)], fill=255)
        elif shape == "diamond":
            d.polygon([(mid, lo), (hi, mid), (mid, hi), (lo, mid)], fill=255)
        else:  # guarded by WorldObject validation
            raise ValueError(f"unknown shape {shape!r}")
        small = img.reduce(SUPERSAMPLE)  # box filter: anti-aliased coverage
        return np.asarray(small, dtype=np.float32)[..., None] / 255.0

    outer, inner = mask(0.0), mask(border)
    inner = np.minimum(inner, outer)
    fill = np.array(PALETTE[colour], dtype=np.float32)
    edge = fill * 0.72
    premult = edge * (outer - inner) + fill * inner  # (side, side, 3)
    return premult, outer


@lru_cache(maxsize=16)
def _background(size: int, lamp: bool | None) -> np.ndarray:
    """The empty room (size, size, 3) uint8, with the lamp's bulb hanging at the top center when there is one."""
    if lamp is None:
        return np.full((size, size, 3), BACKGROUND, dtype=np.uint8)
    big = size * SUPERSAMPLE
    img = Image.new("RGB", (big, big), BACKGROUND_LAMP_ON if lamp else BACKGROUND_LAMP_OFF)
    d = ImageDraw.Draw(img)
    cx, r = big / 2, big * 0.055
    cy = big * 0.085
    if lamp:
        glow = tuple(int(0.5 * a + 0.5 * b) for a, b in zip(BULB_ON, BACKGROUND_LAMP_ON))
        d.ellipse([cx - 2.1 * r, cy - 2.1 * r, cx + 2.1 * r, cy + 2.1 * r], fill=glow)
    d.line([(cx, 0), (cx, cy - r)], fill=SCREEN_EDGE, width=max(1, int(big * 0.008)))
    d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=BULB_ON if lamp else BULB_OFF)
    return np.asarray(img.reduce(SUPERSAMPLE), dtype=np.uint8).copy()


def _screen_span(size: int) -> tuple[int, int]:
    cell = size / GRID
    return int(round(SCREEN_COLUMN * cell)), int(round((SCREEN_COLUMN + 1) * cell))


def draw_frame(
    objects: Sequence[Placed], screen: bool = False, lamp: bool | None = None, size: int = 128
) -> np.ndarray:
    """Draw one frame (size, size, 3) uint8: room, objects at grid positions, then the screen in front."""
    _check_size(size)
    frame = _background(size, lamp).copy()
    cell = size / GRID
    side = int(round(OBJECT_SCALE * cell))
    for colour, shape, row, col in objects:
        premult, alpha = _sprite(colour, shape, side)
        y0 = int(round((row + 0.5) * cell - side / 2))
        x0 = int(round((col + 0.5) * cell - side / 2))
        # Clip to the frame (objects stay inside, but be safe at the walls).
        sy0, sx0 = max(0, -y0), max(0, -x0)
        sy1, sx1 = side - max(0, y0 + side - size), side - max(0, x0 + side - size)
        if sy1 <= sy0 or sx1 <= sx0:
            continue
        region = frame[y0 + sy0 : y0 + sy1, x0 + sx0 : x0 + sx1].astype(np.float32)
        a = alpha[sy0:sy1, sx0:sx1]
        region = region * (1.0 - a) + premult[sy0:sy1, sx0:sx1]
        frame[y0 + sy0 : y0 + sy1, x0 + sx0 : x0 + sx1] = np.clip(np.rint(region), 0, 255).astype(np.uint8)
    if screen:
        x0, x1 = _screen_span(size)
        frame[:, x0:x1] = SCREEN_FILL
        frame[:, x0] = SCREEN_EDGE
        frame[:, x1 - 1] = SCREEN_EDGE
    return frame


def render_scene(scene: Scene, size: int = 128) -> np.ndarray:
    """Ground-truth frame (size, size, 3) uint8 of a parsed scene."""
    placed = [(o.colour, o.shape, float(o.row), float(o.col)) for o in scene.objects]
    return draw_frame(placed, screen=scene.screen, lamp=scene.lamp, size=size)


def render_state(text: str, size: int = 128) -> np.ndarray:
    """Ground-truth frame (size, size, 3) uint8 of a state sentence; ValueError names a bad word."""
    _check_size(size)
    return render_scene(parse_state(text), size=size)


assert set(PALETTE) == set(COLOURS) and len(SHAPES) == 4
