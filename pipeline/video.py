"""Video in and out: decode a clip with PyAV, sample it by stride or state rate within limits, encode H.264 MP4.

Frames are `(H, W, 3)` uint8 RGB arrays throughout. Every problem with a clip is a `VideoError` (a `UserError`)
whose message says what was wrong and which limit to change, after the file's name when the clip is a path
("bad.mp4: not a readable video"); a bad sampling argument is a plain `UserError`.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

import av
import cv2
import numpy as np

from pipeline.domain import Domain
from pipeline.params import check_params
from pipeline.utils import UserError, atomic_write_bytes

logger = logging.getLogger(__name__)

VideoSource = str | os.PathLike[str] | bytes | BinaryIO


class VideoError(UserError):
    """The clip cannot be read, or it is outside the configured limits (the message names the file when the
    clip was given as a path; an API names its form field)."""


class TooManyStatesError(VideoError):
    """The clip gives more states than `VideoLimits.max_frames` at the asked sampling."""


@dataclass(frozen=True)
class VideoLimits:
    """What a clip may be before any work is spent on it.

    Args:
        max_frames: most sampled frames (= observed states) a clip may give.
        max_side: longest side, in pixels, of the decoded video stream.
        max_duration_s: longest clip, in seconds.
        work_side: sampled frames are scaled down (aspect kept) so their longest side is at most this;
            captioners resize anyway, and this bounds memory. None keeps the decoded size.
    """

    max_frames: int = 64
    max_side: int = 4096
    max_duration_s: float = 120.0
    work_side: int | None = 512

    def __post_init__(self) -> None:
        if self.max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {self.max_frames}")
        if self.max_side < 16:
            raise ValueError(f"max_side must be >= 16, got {self.max_side}")
        if self.max_duration_s <= 0:
            raise ValueError(f"max_duration_s must be > 0, got {self.max_duration_s}")
        if self.work_side is not None and self.work_side < 16:
            raise ValueError(f"work_side must be >= 16 or None, got {self.work_side}")


@dataclass
class SampledClip:
    """The frames picked from a clip, with where they came from."""

    frames: list[np.ndarray]  # each (H, W, 3) uint8
    indices: list[int]  # index of each picked frame in the decoded stream
    times: list[float]  # its presentation time in seconds, from the first frame
    source_fps: float
    state_rate: float  # picked frames per second of video: the rate of the states
    size: tuple[int, int] = field(default=(0, 0))  # decoded (width, height)


def _open(source: VideoSource) -> av.container.InputContainer:
    if isinstance(source, bytes | bytearray):
        if len(source) == 0:
            raise VideoError("the file is empty")
        source = io.BytesIO(source)
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise VideoError("no such file")
        if path.stat().st_size == 0:
            raise VideoError("the file is empty")
        source = str(path)
    try:
        return av.open(source, mode="r")
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as err:
        logger.debug("cannot open the video: %r", err)  # the decoder's words are for developers, not users
        raise VideoError("not a readable video") from None


def _scale_down(frame: np.ndarray, side: int | None) -> np.ndarray:
    h, w = frame.shape[:2]
    if side is None or max(h, w) <= side:
        return frame
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(frame, size, interpolation=cv2.INTER_AREA)


def check_sampling(stride: int | None, state_rate: float | None) -> None:
    """How frames are picked: every `stride`-th one, or `state_rate` per second, or (neither) all of them; checked
    by the one model of the call parameters (pipeline.params), a UserError naming the bad one otherwise."""
    try:
        check_params(stride=stride, state_rate=state_rate)
    except ValueError as err:
        raise UserError(str(err)) from None


def read_video(
    source: VideoSource,
    *,
    stride: int | None = None,
    state_rate: float | None = None,
    limits: VideoLimits | None = None,
    on_frame: Callable[[], None] | None = None,
) -> SampledClip:
    """Decode `source` and pick every `stride`-th frame, or frames `1 / state_rate` seconds apart.

    With neither, every frame is picked (stride 1). Raises `VideoError` for an unreadable, empty or
    audio-only file and for a clip past `limits` (size, duration, or more picked frames than allowed), its
    message after the file's name when `source` is a path; a bad `stride` or `state_rate` is a `UserError`.
    `on_frame()` runs after every decoded frame; whatever it raises (a deadline, a cancel) stops decoding.
    """
    limits = limits or VideoLimits()
    check_sampling(stride, state_rate)
    try:
        return _decode(source, stride, state_rate, limits, on_frame)
    except VideoError as err:
        if isinstance(source, str | os.PathLike):
            raise type(err)(f"{os.fspath(source)}: {err}") from None
        raise


def _decode(
    source: VideoSource,
    stride: int | None,
    state_rate: float | None,
    limits: VideoLimits,
    on_frame: Callable[[], None] | None,
) -> SampledClip:
    container = _open(source)
    try:
        if not container.streams.video:
            raise VideoError("the file has no video stream")
        stream = container.streams.video[0]
        ctx = stream.codec_context
        if ctx is None or not ctx.width or not ctx.height:
            raise VideoError("not a readable video (its video stream cannot be decoded)")
        stream.thread_type = "AUTO"
        width, height = ctx.width, ctx.height
        if max(width, height) > limits.max_side:
            raise VideoError(
                f"video is {width}x{height}; the limit is {limits.max_side} pixels on the longest side"
            )
        rate = stream.average_rate or stream.guessed_rate or Fraction(25)
        source_fps = float(rate)
        if container.duration is not None and container.duration / 1e6 > limits.max_duration_s + 1e-3:
            raise VideoError(
                f"clip lasts {container.duration / 1e6:.1f} s; the limit is {limits.max_duration_s:g} s"
            )

        frames: list[np.ndarray] = []
        indices: list[int] = []
        times: list[float] = []
        t0: float | None = None
        next_t = 0.0
        step = stride or 1
        try:
            for i, frame in enumerate(container.decode(stream)):
                if on_frame is not None:
                    on_frame()
                t = float(frame.time) if frame.time is not None else i / source_fps
                t0 = t if t0 is None else t0
                t -= t0
                if t > limits.max_duration_s + 1e-3:
                    raise VideoError(f"clip lasts more than {limits.max_duration_s:g} s (the limit)")
                if state_rate is not None:
                    if t + 0.5 / source_fps < next_t:  # not yet at the next sampling instant
                        continue
                    next_t += 1.0 / state_rate
                elif i % step:
                    continue
                if len(frames) >= limits.max_frames:
                    how = f"state rate {state_rate:g} Hz" if state_rate else f"stride {step}"
                    raise TooManyStatesError(
                        f"clip gives more than {limits.max_frames} states at {how}; "
                        "raise the stride, lower the state rate, or cut the clip"
                    )
                frames.append(_scale_down(frame.to_ndarray(format="rgb24"), limits.work_side))
                indices.append(i)
                times.append(t)
        except av.error.FFmpegError as err:
            if not frames:
                logger.debug("cannot decode the video: %r", err)
                raise VideoError("not a readable video") from None
            logger.warning("decoding stopped early after %d picked frames: %s", len(frames), err)
    finally:
        container.close()

    if not frames:
        raise VideoError("the video has no frames")
    picked_rate = float(state_rate) if state_rate else source_fps / step
    return SampledClip(frames, indices, times, source_fps, picked_rate, (width, height))


def _even_frame(frame: np.ndarray) -> np.ndarray:
    # yuv420p needs even width and height: pad by repeating the last row/column.
    h, w = frame.shape[:2]
    if h % 2 or w % 2:
        frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    return frame


def check_frames(frames: Sequence[np.ndarray], name: str = "frames") -> None:
    """Raise ValueError unless `frames` is a non-empty list of (H, W, 3) uint8 arrays of one size."""
    if len(frames) == 0:
        raise ValueError(f"{name} is empty")
    shape = frames[0].shape
    for i, f in enumerate(frames):
        if not isinstance(f, np.ndarray) or f.dtype != np.uint8 or f.ndim != 3 or f.shape[2] != 3:
            raise ValueError(f"{name}[{i}] must be an (H, W, 3) uint8 array")
        if f.shape != shape:
            raise ValueError(f"{name}[{i}] has shape {f.shape}; {name}[0] has {shape}")


def encode_mp4(frames: Sequence[np.ndarray], fps: float, x264_params: str | None = None) -> bytes:
    """Encode frames as H.264 (yuv420p, faststart) MP4 bytes that browsers play; odd sizes gain one pixel.
    x264_params: more encoder settings ("threads=1:sliced-threads=0" pins x264's own threads too, so that a
    loaded machine gives the same bytes)."""
    check_frames(frames)
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    rate = Fraction(fps).limit_denominator(1001)
    # faststart moves the index to the front (playback can begin before the download ends); the muxer
    # rewrites the file for that, so it needs a real file rather than a BytesIO.
    with tempfile.TemporaryDirectory(prefix="semworld-mp4-") as tmp:
        path = os.path.join(tmp, "out.mp4")
        _encode_to(path, frames, rate, x264_params)
        with open(path, "rb") as f:
            return f.read()


def _encode_to(
    path: str, frames: Sequence[np.ndarray], rate: Fraction, x264_params: str | None = None
) -> None:
    with av.open(path, mode="w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=rate)
        first = _even_frame(frames[0])
        stream.width, stream.height = first.shape[1], first.shape[0]
        stream.pix_fmt = "yuv420p"
        stream.options = {
            "crf": "20",
            "preset": "veryfast",
            **({"x264-params": x264_params} if x264_params else {}),
        }
        # One encoder thread: the same frames give the same bytes whatever the machine's load (a retried batch
        # write must reproduce its folder); clips here are small, so threads would buy little.
        stream.codec_context.thread_count = 1
        for frame in frames:
            vf = av.VideoFrame.from_ndarray(_even_frame(frame), format="rgb24")
            for packet in stream.encode(vf):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_samples(folder: str | os.PathLike[str], domain: Domain, seed: int = 0) -> list[Path]:
    """Write the domain's sample clips (`Domain.sample_clips`) as `<name>.mp4` (for demos and the web page);
    [] for a domain that has none."""
    out = Path(folder)
    paths = []
    for clip in domain.sample_clips(seed):
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{clip.name}.mp4"
        atomic_write_bytes(path, encode_mp4(list(clip.frames), clip.fps))
        paths.append(path)
    return paths
