"""What a prediction leaves behind: PNG frames, an H.264 MP4, a states JSON, a side-by-side strip, a zip of all.

Every file is written atomically (a temporary file in the same folder, then `os.replace`), so a reader never
sees half a file, even if the process dies mid-write.
"""

from __future__ import annotations

import io
import json
import textwrap
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from pipeline.utils import atomic_write_bytes
from pipeline.video import encode_mp4
from pipeline.world_model import WorldModelOutput

STATES_FILE = "states.json"
VIDEO_FILE = "predicted.mp4"
STRIP_FILE = "strip.png"


@dataclass
class OutputFiles:
    """Paths of what `write_outputs` wrote (relative names are inside `out_dir`)."""

    out_dir: Path
    predicted_frames: list[Path]
    observed_frames: list[Path]
    states: Path
    video: Path | None
    strip: Path


def png_bytes(frame: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


def states_document(output: WorldModelOutput) -> dict[str, Any]:
    """The states JSON: both lists, and one entry per step saying whether it was observed or predicted."""
    n_obs = len(output.observed_states)
    indices: list[int | None] = list(output.source_indices) or [None] * n_obs
    confidence = list(output.observed_confidence) or [None] * n_obs
    parses = list(output.observed_parses) or [None] * n_obs
    steps: list[dict[str, Any]] = [
        {"step": i, "kind": "observed", "state": s, "frame_index": idx, "confidence": c, "parses": ok}
        for i, (s, idx, c, ok) in enumerate(zip(output.observed_states, indices, confidence, parses, strict=True))
    ]
    steps += [
        {"step": n_obs + j, "kind": "predicted", "state": s} for j, s in enumerate(output.predicted_states)
    ]
    return {
        "observed_states": output.observed_states,
        "predicted_states": output.predicted_states,
        "state_rate": output.state_rate,
        "confidence_threshold": output.confidence_threshold,
        "warnings": output.warnings,
        "steps": steps,
    }


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _tile(frame: np.ndarray | None, state: str, label: str, height: int, width: int) -> Image.Image:
    """One column of the strip: the frame scaled to `height`, a label, and the state wrapped below it."""
    font = _font(11)
    lines = [label] + textwrap.wrap(state, width=max(8, width // 7))[:6]
    text_h = 14 * len(lines) + 6
    tile = Image.new("RGB", (width, height + text_h), "white")
    if frame is not None:
        img = Image.fromarray(frame)
        img = img.resize((width, height), Image.Resampling.LANCZOS)
        tile.paste(img, (0, 0))
    draw = ImageDraw.Draw(tile)
    for k, line in enumerate(lines):
        draw.text((3, height + 3 + 14 * k), line, fill=(20, 20, 20) if k else (90, 90, 160), font=font)
    return tile


def make_strip(
    observed_frames: Sequence[np.ndarray],
    observed_states: Sequence[str],
    predicted_frames: Sequence[np.ndarray],
    predicted_states: Sequence[str],
    height: int = 96,
) -> np.ndarray:
    """Observed frames with their states, a gap, then predicted frames with theirs, left to right."""
    if not observed_states and not predicted_states:
        raise ValueError("nothing to draw: no observed and no predicted states")
    ref = next(iter([*observed_frames, *predicted_frames]), None)
    aspect = ref.shape[1] / ref.shape[0] if ref is not None else 1.0
    width = max(64, round(height * aspect))
    obs = [
        _tile(observed_frames[i] if i < len(observed_frames) else None, s, f"observed t={i}", height, width)
        for i, s in enumerate(observed_states)
    ]
    n = len(observed_states)
    pred = [
        _tile(
            predicted_frames[j] if j < len(predicted_frames) else None,
            s,
            f"predicted t={n + j}",
            height,
            width,
        )
        for j, s in enumerate(predicted_states)
    ]
    gap = 12 if obs and pred else 0
    tiles = obs + pred
    total_w = sum(t.width for t in tiles) + 2 * (len(tiles) - 1) + gap
    total_h = max(t.height for t in tiles)
    strip = Image.new("RGB", (total_w, total_h), (235, 235, 235))
    x = 0
    for i, t in enumerate(tiles):
        if i == len(obs) and gap:
            ImageDraw.Draw(strip).rectangle([x, 0, x + gap - 4, total_h], fill=(200, 60, 60))
            x += gap
        strip.paste(t, (x, 0))
        x += t.width + 2
    return np.asarray(strip)


def write_outputs(
    output: WorldModelOutput, out_dir: str | Path, *, write_observed: bool = True
) -> OutputFiles:
    """Write PNG frames, the MP4, states.json and strip.png into `out_dir` (created if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    predicted = []
    for j, frame in enumerate(output.predicted_frames):
        path = out / f"predicted_{j:03d}.png"
        atomic_write_bytes(path, png_bytes(frame))
        predicted.append(path)
    observed = []
    if write_observed:
        for i, frame in enumerate(output.observed_frames):
            path = out / f"observed_{i:03d}.png"
            atomic_write_bytes(path, png_bytes(frame))
            observed.append(path)
    video = None
    if output.predicted_frames:
        video = out / VIDEO_FILE
        atomic_write_bytes(video, output.video or encode_mp4(output.predicted_frames, output.state_rate))
    states = out / STATES_FILE
    atomic_write_bytes(states, (json.dumps(states_document(output), indent=2) + "\n").encode())
    strip = out / STRIP_FILE
    image = make_strip(
        output.observed_frames, output.observed_states, output.predicted_frames, output.predicted_states
    )
    atomic_write_bytes(strip, png_bytes(image))
    return OutputFiles(out, predicted, observed, states, video, strip)


def zip_outputs(output: WorldModelOutput) -> bytes:
    """Everything `write_outputs` writes, as one zip archive in memory."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for j, frame in enumerate(output.predicted_frames):
            zf.writestr(f"predicted_{j:03d}.png", png_bytes(frame))
        for i, frame in enumerate(output.observed_frames):
            zf.writestr(f"observed_{i:03d}.png", png_bytes(frame))
        if output.predicted_frames:
            zf.writestr(VIDEO_FILE, output.video or encode_mp4(output.predicted_frames, output.state_rate))
        zf.writestr(STATES_FILE, json.dumps(states_document(output), indent=2) + "\n")
        image = make_strip(
            output.observed_frames, output.observed_states, output.predicted_frames, output.predicted_states
        )
        zf.writestr(STRIP_FILE, png_bytes(image))
    return buf.getvalue()
