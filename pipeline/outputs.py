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

from pipeline.confidence import unsure_flags
from pipeline.utils import atomic_write_bytes
from pipeline.video import encode_mp4
from pipeline.world_model import WorldModelOutput

STATES_FILE = "states.json"
VIDEO_FILE = "predicted.mp4"
STORY_FILE = "context_forecast.mp4"  # context then forecast, a marker where the forecast begins
TRUTH_FILE = "forecast_vs_truth.mp4"  # with truth frames: forecast and truth side by side
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
    story: Path | None = None  # context then forecast
    versus: Path | None = None  # forecast beside truth


def png_bytes(frame: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG")
    return buf.getvalue()


def changes_of(output: WorldModelOutput) -> list[list[str]]:
    """Per step (observed, then predicted), what changed since the step before in the domain's words, as the
    pipeline found it; no changes at all for an output made without a domain."""
    n = len(output.observed_states) + len(output.predicted_states)
    return list(output.changes) if len(output.changes) == n else [[] for _ in range(n)]


def state_fields(output: WorldModelOutput) -> dict[str, Any]:
    """What an output says about its states, under the names the CLI's `--json` and the service's responses
    share: both lists, per observed state its confidence and verdict, per predicted state its verdict, the
    threshold, the warnings, the timeline of changes and the domain."""
    return {
        "observed_states": output.observed_states,
        "predicted_states": output.predicted_states,
        "observed_confidence": output.observed_confidence,
        "observed_parses": output.observed_parses,
        "predicted_parses": output.predicted_parses,
        "confidence_threshold": output.confidence_threshold,
        "warnings": output.warnings,
        "changes": changes_of(output),
        "domain": output.domain,
        **({"actions": output.actions} if output.actions else {}),
    }


def states_document(output: WorldModelOutput) -> dict[str, Any]:
    """The states JSON: both lists, and one entry per step: observed or predicted, its confidence when read,
    whether it parses in the weights' domain (None: a domain without a grammar), and what changed since the step
    before (`changes_of`)."""
    n_obs = len(output.observed_states)
    indices: list[int | None] = list(output.source_indices) or [None] * n_obs
    confidence = list(output.observed_confidence) or [None] * n_obs
    parses = list(output.observed_parses) or [None] * n_obs
    steps: list[dict[str, Any]] = [
        {"step": i, "kind": "observed", "state": s, "frame_index": idx, "confidence": c, "parses": ok}
        for i, (s, idx, c, ok) in enumerate(
            zip(output.observed_states, indices, confidence, parses, strict=True)
        )
    ]
    predicted_parses = list(output.predicted_parses) or [None] * len(output.predicted_states)
    steps += [
        {"step": n_obs + j, "kind": "predicted", "state": s, "parses": ok}
        for j, (s, ok) in enumerate(zip(output.predicted_states, predicted_parses, strict=True))
    ]
    for step, changed in zip(steps, changes_of(output), strict=True):
        step["changes"] = changed  # what changed since the step before, in words
    if output.actions:  # a predictor with actions: the action taken after each step (the last steers nothing)
        for i, step in enumerate(steps):
            step["action"] = output.actions[i] if i < len(output.actions) else None
    return {
        "observed_states": output.observed_states,
        "predicted_states": output.predicted_states,
        "state_rate": output.state_rate,
        "confidence_threshold": output.confidence_threshold,
        "warnings": output.warnings,
        **({"actions": output.actions} if output.actions else {}),
        "steps": steps,
    }


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


OBSERVED_COLOUR = (70, 90, 170)
PREDICTED_COLOUR = (200, 60, 60)
UNSURE_COLOUR = (235, 160, 30)  # amber: a read the captioner was unsure of, and the clip's warning
STRIP_MAX_WIDTH = 1600  # px: longer runs wrap onto more rows


def fit(
    frame: np.ndarray, width: int, height: int, background: tuple[int, int, int] = (255, 255, 255)
) -> Image.Image:
    """`frame` scaled to fit a width x height box, aspect kept (a square frame in a wide box gets side bands)."""
    img = Image.fromarray(frame)
    scale = min(width / img.width, height / img.height)
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    box = Image.new("RGB", (width, height), background)
    box.paste(img.resize(size, Image.Resampling.LANCZOS), ((width - size[0]) // 2, (height - size[1]) // 2))
    return box


def _tile(frame: np.ndarray | None, state: str, label: str, height: int, width: int, colour: tuple[int, int, int],
          changes: Sequence[str] | None = None, unsure: bool = False) -> Image.Image:  # fmt: skip
    """One cell of the strip: the frame fitted into width x height, a label, the whole state wrapped below it,
    then what changed since the step before (grey; "no change" when nothing did, nothing when `changes` is None:
    the first step, or no timeline). An `unsure` read is framed and labelled in amber."""
    if unsure:
        label, colour = f"{label} UNSURE", UNSURE_COLOUR
    font = _font(11)
    chars = max(8, width // 6)
    state_lines = textwrap.wrap(state, width=chars) or [""]
    said = [] if changes is None else list(changes) or ["no change"]
    change_lines = [line for c in said for line in textwrap.wrap(c, width=chars, subsequent_indent="  ")]
    lines = [
        (label, colour),
        *[(t, (20, 20, 20)) for t in state_lines],
        *[(t, (120, 120, 120)) for t in change_lines],
    ]
    tile = Image.new("RGB", (width, height + 14 * len(lines) + 8), "white")
    if frame is not None:
        tile.paste(fit(frame, width, height), (0, 0))
    else:
        ImageDraw.Draw(tile).text((4, height // 2 - 7), "(no frame)", fill=(150, 150, 150), font=font)
    draw = ImageDraw.Draw(tile)
    draw.rectangle([0, height, width - 1, height + 2], fill=colour)
    for k, (line, fill) in enumerate(lines):
        draw.text((3, height + 5 + 14 * k), line, fill=fill, font=font)
    if unsure:
        draw.rectangle([0, 0, width - 1, tile.height - 1], outline=colour, width=3)
    return tile


def _banner(text: str, width: int) -> Image.Image:
    """The clip's warning across the top of the strip, in amber, wrapped to the strip's width."""
    font = _font(12)
    lines = textwrap.wrap(f"warning: {text}", width=max(20, (width - 8) // 7))
    banner = Image.new("RGB", (width, 16 * len(lines) + 8), UNSURE_COLOUR)
    draw = ImageDraw.Draw(banner)
    for k, line in enumerate(lines):
        draw.text((4, 4 + 16 * k), line, fill=(0, 0, 0), font=font)
    return banner


def make_strip(
    observed_frames: Sequence[np.ndarray | None],
    observed_states: Sequence[str],
    predicted_frames: Sequence[np.ndarray],
    predicted_states: Sequence[str],
    height: int = 112,
    max_width: int = STRIP_MAX_WIDTH,
    changes: Sequence[Sequence[str]] | None = None,
    unsure: Sequence[bool] | None = None,
    warning: str | None = None,
) -> np.ndarray:
    """Observed frames with their states, then predicted frames with theirs (a red bar where the forecast
    begins), in rows at most `max_width` px wide. Frames keep their aspect; every state is shown in full;
    `changes` (one list per step) goes under each state. Observed states flagged in `unsure` are marked in amber,
    and a `warning` (the clip's, pipeline.confidence) runs across the top."""
    if not observed_states and not predicted_states:
        raise ValueError("nothing to draw: no observed and no predicted states")
    ref = next((f for f in [*observed_frames, *predicted_frames] if f is not None), None)
    aspect = ref.shape[1] / ref.shape[0] if ref is not None else 1.0
    width = max(128, round(height * aspect))
    n = len(observed_states)
    steps = [*observed_states, *predicted_states]
    frames = [*(observed_frames[i] if i < len(observed_frames) else None for i in range(n)),
              *(predicted_frames[j] if j < len(predicted_frames) else None for j in range(len(predicted_states)))]  # fmt: skip
    tiles = [
        _tile(
            frames[t],
            state,
            f"{'observed' if t < n else 'predicted'} t={t}",
            height,
            width,
            OBSERVED_COLOUR if t < n else PREDICTED_COLOUR,
            changes[t] if changes and t else None,
            bool(unsure and t < len(unsure) and unsure[t]),
        )  # fmt: skip
        for t, state in enumerate(steps)
    ]
    gap, bar = 2, 6
    per_row = max(1, (max_width + gap) // (width + gap + (bar if n and predicted_states else 0)))
    rows = [tiles[i : i + per_row] for i in range(0, len(tiles), per_row)]
    row_h = [max(t.height for t in row) for row in rows]
    total_w = max(len(row) for row in rows) * (width + gap) + (bar if n and predicted_states else 0)
    top = _banner(warning, total_w) if warning else None
    y = top.height + gap if top is not None else 0
    strip = Image.new("RGB", (total_w, y + sum(row_h) + gap * (len(rows) - 1)), (235, 235, 235))
    if top is not None:
        strip.paste(top, (0, 0))
    draw = ImageDraw.Draw(strip)
    for r, row in enumerate(rows):
        x = 0
        for k, t in enumerate(row):
            index = r * per_row + k
            if index == n and n and predicted_states:  # the forecast begins here
                draw.rectangle([x, y, x + bar - 2, y + row_h[r]], fill=PREDICTED_COLOUR)
                x += bar
            strip.paste(t, (x, y))
            x += t.width + gap
        y += row_h[r] + gap
    return np.asarray(strip)


def _labelled(frame: np.ndarray, label: str, colour: tuple[int, int, int], size: tuple[int, int],
              border: bool) -> np.ndarray:  # fmt: skip
    """A video frame: `frame` fitted into size (w, h) with a label band below; a coloured border marks the
    forecast."""
    w, h = size
    band = 20
    canvas = Image.new("RGB", (w, h + band), (255, 255, 255))
    canvas.paste(fit(frame, w, h, (0, 0, 0)), (0, 0))
    draw = ImageDraw.Draw(canvas)
    draw.rectangle([0, h, w, h + band], fill=colour)
    draw.text((4, h + 4), label, fill=(255, 255, 255), font=_font(12))
    if border:
        draw.rectangle([0, 0, w - 1, h + band - 1], outline=colour, width=3)
    return np.asarray(canvas)


def story_frames(output: WorldModelOutput, side: int = 256) -> list[np.ndarray]:
    """Context then forecast, one frame per state: the observed frames (or the drawn context of states given in
    words), labelled in blue, then the predicted ones labelled "forecast" with a red border from the first."""
    n = len(output.observed_states)
    context = list(output.observed_frames) or list(output.context_frames)
    first = n - len(context)  # the step of the first context frame
    ref = next(iter([*context, *output.predicted_frames]), None)
    if ref is None:
        return []
    aspect = ref.shape[1] / ref.shape[0]
    size = (side, max(16, round(side / aspect))) if aspect >= 1 else (max(16, round(side * aspect)), side)
    size = (size[0] + size[0] % 2, size[1] + size[1] % 2)
    out = [
        _labelled(f, f"observed t={first + i}", OBSERVED_COLOUR, size, False) for i, f in enumerate(context)
    ]
    out += [_labelled(f, f"forecast t={n + j}", PREDICTED_COLOUR, size, True)
            for j, f in enumerate(output.predicted_frames)]  # fmt: skip
    return out


def side_by_side(predicted: Sequence[np.ndarray], truth: Sequence[np.ndarray], first_step: int,
                 side: int = 256) -> list[np.ndarray]:  # fmt: skip
    """Forecast (left) and truth (right) per step, as many steps as both have."""
    size = (side, side)
    return [
        np.concatenate(
            [
                _labelled(p, f"forecast t={first_step + j}", PREDICTED_COLOUR, size, True),
                _labelled(t, f"truth t={first_step + j}", (60, 140, 60), size, False),
            ],
            axis=1,
        )  # fmt: skip
        for j, (p, t) in enumerate(zip(predicted, truth))
    ]


def write_outputs(
    output: WorldModelOutput,
    out_dir: str | Path,
    *,
    write_observed: bool = True,
    truth_frames: Sequence[np.ndarray] = (),
) -> OutputFiles:
    """Write PNG frames, predicted.mp4, context_forecast.mp4, states.json and strip.png into `out_dir` (created
    if missing); with `truth_frames` (the true frames of the predicted steps) also forecast_vs_truth.mp4."""
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
    atomic_write_bytes(strip, png_bytes(strip_of(output)))
    story = None
    frames = story_frames(output)
    if output.predicted_frames and frames:
        story = out / STORY_FILE
        atomic_write_bytes(story, encode_mp4(frames, output.state_rate))
    versus = None
    if truth_frames and output.predicted_frames:
        versus = out / TRUTH_FILE
        pairs = side_by_side(output.predicted_frames, truth_frames, len(output.observed_states))
        atomic_write_bytes(versus, encode_mp4(pairs, output.state_rate))
    return OutputFiles(out, predicted, observed, states, video, strip, story, versus)


def strip_of(output: WorldModelOutput) -> np.ndarray:
    """strip.png of an output: observed frames (or the drawn context of states given in words), the forecast,
    and the timeline of changes under each state."""
    n = len(output.observed_states)
    observed: list[np.ndarray | None] = list(output.observed_frames)
    if not observed and output.context_frames:
        observed = [None] * (n - len(output.context_frames)) + list(output.context_frames)
    unsure_reads = unsure_flags(
        output.observed_confidence, output.observed_parses, output.confidence_threshold
    )
    return make_strip(observed, output.observed_states, output.predicted_frames, output.predicted_states,
                      changes=changes_of(output), unsure=unsure_reads,
                      warning=output.warnings[0] if output.warnings else None)  # fmt: skip


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
        zf.writestr(STRIP_FILE, png_bytes(strip_of(output)))
        frames = story_frames(output)
        if output.predicted_frames and frames:
            zf.writestr(STORY_FILE, encode_mp4(frames, output.state_rate))
    return buf.getvalue()
