"""Decoding, sampling, limits and H.264 encoding of clips."""

from __future__ import annotations

import re
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.utils import UserError
from pipeline.video import VideoError, VideoLimits, check_frames, encode_mp4, read_video
from tests.fakes import Stop, stop_at

ASSET = Path(__file__).resolve().parents[1] / "assets" / "bigbuckbunny_160x90.mp4"


def test_asset_decodes_and_stride_picks_every_kth():
    clip = read_video(ASSET)
    assert (
        len(clip.frames) == 16 and clip.frames[0].shape == (90, 160, 3) and clip.frames[0].dtype == np.uint8
    )
    assert clip.size == (160, 90) and clip.source_fps == pytest.approx(6.25)
    by3 = read_video(ASSET, stride=3)
    assert by3.indices == [0, 3, 6, 9, 12, 15] and by3.state_rate == pytest.approx(6.25 / 3)
    assert np.array_equal(by3.frames[1], clip.frames[3])


def test_state_rate_picks_frames_nearest_each_instant():
    clip = read_video(ASSET, state_rate=2.0)
    assert clip.indices == [0, 3, 6, 9, 12]  # 0.5 s apart at 6.25 fps: 0, 0.48, 0.96, 1.44, 1.92 s
    assert clip.state_rate == 2.0


def test_bytes_and_paths_decode_alike():
    a = read_video(ASSET.read_bytes(), stride=5)
    b = read_video(str(ASSET), stride=5)
    assert a.indices == b.indices and all(np.array_equal(x, y) for x, y in zip(a.frames, b.frames))


def test_work_side_scales_down_keeping_aspect():
    clip = read_video(ASSET, limits=VideoLimits(work_side=80))
    assert clip.frames[0].shape == (45, 80, 3)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (VideoLimits(max_frames=10), "clip gives more than 10 states at stride 1"),
        (VideoLimits(max_side=100), "video is 160x90; the limit is 100 pixels"),
        (VideoLimits(max_duration_s=1.0), "clip lasts 2.6 s; the limit is 1 s"),
    ],
)
def test_limits_give_clear_errors(limits, message):
    with pytest.raises(VideoError, match=f"^{re.escape(str(ASSET))}: {message}"):
        read_video(ASSET, limits=limits)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "the file is empty"),
        (b"this is not a video at all" * 10, "not a readable video"),
        (ASSET.read_bytes()[:400], "not a readable video|has no frames"),
    ],
)
def test_bad_files_are_user_errors(data, message):
    with pytest.raises(VideoError, match=message) as bytes_error:
        read_video(data)
    assert "Error" not in str(bytes_error.value)  # no exception class of the decoder in a user's message


def test_a_bad_file_given_by_path_is_named_first(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"this is not a video at all" * 10)
    with pytest.raises(VideoError) as err:
        read_video(bad)
    assert str(err.value) == f"{bad}: not a readable video"
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(VideoError, match=f"^{re.escape(str(tmp_path))}/empty.mp4: the file is empty$"):
        read_video(str(tmp_path / "empty.mp4"))


def test_missing_path_and_bad_arguments():
    with pytest.raises(VideoError, match="^/nope.mp4: no such file$"):
        read_video("/nope.mp4")
    # the argument, not the clip, is wrong: no file name, and not a VideoError (an API names no upload field)
    with pytest.raises(UserError, match="^stride: Input should be greater than or equal to 1, got 0$") as err:
        read_video(ASSET, stride=0)
    assert not isinstance(err.value, VideoError)
    with pytest.raises(UserError, match="^give either stride or state_rate"):
        read_video(ASSET, stride=2, state_rate=1.0)
    with pytest.raises(ValueError, match="max_frames must be >= 1"):
        VideoLimits(max_frames=0)


def test_audio_only_file_has_no_video_stream(tmp_path):
    path = tmp_path / "tone.m4a"
    with av.open(str(path), "w") as c:
        s = c.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for p in s.encode(frame):
            c.mux(p)
        for p in s.encode():
            c.mux(p)
    with pytest.raises(VideoError, match="no video stream"):
        read_video(path)


def test_encode_h264_yuv420p_round_trip_with_odd_size():
    rng = np.random.default_rng(0)
    frames = [np.full((33, 47, 3), v, np.uint8) for v in (0, 128, 255)]
    frames.append(rng.integers(0, 255, (33, 47, 3), dtype=np.uint8))
    data = encode_mp4(frames, fps=4)
    with av.open(__import__("io").BytesIO(data)) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
        assert (s.codec_context.width, s.codec_context.height) == (48, 34)
    decoded = read_video(data).frames
    assert len(decoded) == 4 and abs(int(decoded[1].mean()) - 128) <= 3
    with pytest.raises(ValueError, match="frames is empty"):
        encode_mp4([], fps=4)


def test_check_frames_names_the_bad_frame():
    with pytest.raises(ValueError, match=r"frames\[1\] has shape"):
        check_frames([np.zeros((4, 4, 3), np.uint8), np.zeros((4, 5, 3), np.uint8)])
    with pytest.raises(ValueError, match=r"frames\[0\] must be an \(H, W, 3\) uint8 array"):
        check_frames([np.zeros((4, 4), np.uint8)])


def test_on_frame_runs_per_decoded_frame_and_can_stop_decoding():
    seen: list[int] = []
    clip = read_video(ASSET, stride=4, on_frame=lambda: seen.append(1))
    assert len(seen) > clip.indices[-1] >= 12  # every decoded frame, picked or not

    seen.clear()
    with pytest.raises(Stop):
        read_video(ASSET, on_frame=stop_at(3, seen))
    assert len(seen) == 3
