"""Files of the built-in world: H.264 MP4 clips (PyAV), PNG frames at the state instants, and `states.jsonl`.

Layout of a generated folder (clip i, state k):

    DIR/states.jsonl               one record per clip, in clip order
    DIR/clips/{i:06d}.mp4          H.264, yuv420p, FPS frames per second, browser-playable
    DIR/frames/{i:06d}/{k:02d}.png the frame of state k (video frame k * STRIDE), lossless
"""

from __future__ import annotations

import io
import json
import logging
import multiprocessing
from collections.abc import Iterable
from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image
from tqdm import tqdm

from world.render import render_state
from world.scenarios import FPS, STRIDE, episode, record, resolve_scenarios

log = logging.getLogger(__name__)

# Fixed encoder settings: one thread and no wall-clock metadata, so the same frames give the same bytes.
X264_OPTIONS = {"preset": "veryfast", "crf": "18", "x264-params": "threads=1:sliced-threads=0"}


def rgb_to_yuv420p(frames: np.ndarray) -> np.ndarray:
    """(F, H, W, 3) uint8 RGB -> (F, H * 3 // 2, W) uint8 planar yuv420p (I420, BT.601), via OpenCV.

    Converting here rather than letting PyAV's swscale reformat each frame cuts the cost of a clip by half at
    this frame size; the conversion is per pixel, so it is deterministic.
    """
    return np.stack([cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2YUV_I420) for f in frames])


def encode_mp4(frames: np.ndarray, path: Path | str | io.BytesIO, fps: int = FPS) -> None:
    """Write (F, H, W, 3) uint8 frames as an H.264 MP4 (yuv420p, faststart) that browsers play."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(
            f"frames must be a non-empty (F, H, W, 3) uint8 array, got {frames.shape} {frames.dtype}"
        )
    h, w = frames.shape[1:3]
    if h % 4 or w % 2:
        raise ValueError(f"frame sides must be even (height a multiple of 4), got {w}x{h}")
    yuv = rgb_to_yuv420p(frames)  # (F, 3H/2, W)
    with av.open(path, mode="w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=fps, options=dict(X264_OPTIONS))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.thread_count = 1
        for planes in yuv:
            vf = av.VideoFrame.from_ndarray(planes, format="yuv420p")
            for packet in stream.encode(vf):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def decode_mp4(path: Path | str) -> np.ndarray:
    """All frames (F, H, W, 3) uint8 of a video file (for tests and tools)."""
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def save_png(frame: np.ndarray, path: Path) -> None:
    Image.fromarray(frame).save(path, format="PNG", compress_level=1)


def _write_clip(job: tuple[str, str, int, int, str, int, int]) -> dict:
    """Simulate clip i, write its MP4 and PNGs, and return its `states.jsonl` record."""
    out, scenario, seed, index, split, length, size = job
    root = Path(out)
    ep = episode(scenario, seed, index, length, split)
    stem = f"{index:06d}"
    frames = ep.frames(STRIDE, size)  # (F, size, size, 3)
    clip = f"clips/{stem}.mp4"
    encode_mp4(frames, root / clip, FPS)
    frame_dir = root / "frames" / stem
    frame_dir.mkdir(parents=True, exist_ok=True)
    for k, state in enumerate(ep.states):
        frame = frames[k * STRIDE]
        # The state alone must give this frame; a cheap guard on every clip written.
        assert np.array_equal(frame, render_state(state, size)), (
            f"clip {index} state {k} differs from its render"
        )
        save_png(frame, frame_dir / f"{k:02d}.png")
    return record(ep, seed, clip)


def _prepare(out: Path) -> None:
    try:
        (out / "clips").mkdir(parents=True, exist_ok=True)
        (out / "frames").mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"--out {out}: cannot write there ({err.strerror or err})") from None


def generate(
    out: Path | str,
    scenarios: list[str] | str,
    clips: int,
    seed: int,
    split: str = "train",
    length: int = 12,
    size: int = 128,
    workers: int = 2,
    progress: bool = True,
) -> Path:
    """Write `clips` clips into `out` and return the path of `states.jsonl` (same arguments, same bytes)."""
    names = resolve_scenarios(scenarios)
    if clips < 1:
        raise ValueError(f"--clips must be >= 1, got {clips}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {seed}")
    if size < 32 or size % 2:
        raise ValueError(f"size must be an even number >= 32, got {size}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    episode(names[0], seed, 0, length, split)  # validates split and length before any file is written
    root = Path(out)
    _prepare(root)
    jobs = [(str(root), names[i % len(names)], seed, i, split, length, size) for i in range(clips)]
    path = root / "states.jsonl"
    bar = tqdm(total=clips, desc="world generate", unit="clip", disable=not progress)
    with open(path, "w") as fh:
        if workers == 1 or clips == 1:
            results: Iterable[dict] = map(_write_clip, jobs)
            for rec in results:
                fh.write(json.dumps(rec) + "\n")
                bar.update()
        else:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(min(workers, clips)) as pool:
                for rec in pool.imap(_write_clip, jobs, chunksize=4):
                    fh.write(json.dumps(rec) + "\n")
                    bar.update()
    bar.close()
    log.debug("wrote %d clips of %s to %s", clips, ",".join(dict.fromkeys(names)), root)
    return path
