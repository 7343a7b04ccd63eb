"""`semworld batch` reads clips as `semworld predict` does: at the weights' state rate unless told otherwise, so a
real clip of a few seconds goes through with the README's own command; a clip that still gives too many states
fails with a message naming the flags that change it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.video import encode_mp4, read_video

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

REPO = Path(__file__).resolve().parents[3]
ASSET = REPO / "tests" / "assets" / "bigbuckbunny_160x90.mp4"


@pytest.fixture()
def long_clip(tmp_path) -> Path:
    """A 4 s clip at 25 fps (100 frames): more than the 64 states a clip may give when read frame by frame."""
    frames = read_video(ASSET).frames
    path = tmp_path / "videos" / "long.mp4"
    path.parent.mkdir()
    path.write_bytes(encode_mp4([frames[i % len(frames)] for i in range(100)], 25.0))
    return path


def test_batch_reads_at_the_weights_state_rate_by_default(long_clip, tmp_path, monkeypatch):
    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    out = tmp_path / "out"
    argv = [
        "batch",
        str(long_clip.parent),
        "--out",
        str(out),
        "--no-progress",
        "--device",
        "cpu",
        "--horizon",
        "2",
    ]
    assert cli.main([*argv, "--stages", "caption"]) == 0  # the caption-only path too
    record = json.loads((out / "states.jsonl").read_text().splitlines()[0])
    assert len(record["states"]) == 8  # 4 s at the shipped 2 states per second
    assert cli.main([*argv, "--out", str(tmp_path / "all")]) == 0
    doc = json.loads((tmp_path / "all" / "long" / "states.json").read_text())
    assert len(doc["observed_states"]) == 8 and doc["state_rate"] == pytest.approx(2.0)


def test_too_many_states_names_the_flags(long_clip, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    out = tmp_path / "out"
    code = cli.main(["batch", str(long_clip.parent), "--out", str(out), "--no-progress", "--device", "cpu",
                     "--stages", "caption", "--stride", "1", "--json"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 1
    error = summary["clips"][0]["error"]
    assert "more than 64 states at stride 1" in error and "--state-rate HZ" in error


def test_batch_takes_predicts_model_options(tiny_weights, tmp_path, monkeypatch, capsys):
    """--captioner/--predictor/--renderer, --no-project, --mirror, --dtype, --stage-device and --compile reach
    the pipeline as in `semworld predict`; bad ones are one line before any clip is read."""
    from pipeline.world_model import WorldModelPipeline

    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    got: dict = {}
    real = WorldModelPipeline.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        got.update(kwargs)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", classmethod(spy))
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "a.mp4").write_bytes(ASSET.read_bytes())
    argv = ["batch", str(videos), "--weights", str(tiny_weights), "--stride", "8", "--horizon", "1", "--device",
            "cpu", "--no-progress"]  # fmt: skip
    assert (
        cli.main(
            [
                *argv,
                "--out",
                str(tmp_path / "o"),
                "--predictor",
                str(tiny_weights / "predictor"),
                "--no-project",
                "--dtype",
                "float32",
                "--stage-device",
                "renderer=cpu",
                "--compile",
            ]
        )
        == 0
    )
    assert (
        got["predictor"] == tiny_weights / "predictor" and got["project"] is False and got["mirror"] is False
    )
    assert got["dtype"] == "float32" and got["stage_devices"] == ("renderer=cpu",) and got["compile"] is True
    capsys.readouterr()
    assert cli.main([*argv, "--out", str(tmp_path / "o2"), "--captioner", str(tmp_path / "nowhere")]) == 2
    assert f"--captioner {tmp_path / 'nowhere'}: no such directory" in capsys.readouterr().err
    assert cli.main([*argv, "--out", str(tmp_path / "o3"), "--stage-device", "painter=cpu"]) == 2
    assert "painter" in capsys.readouterr().err and not (tmp_path / "o3").exists()
    # the mirror needs a domain with one: the tiny weights speak free text, so the run stops at loading
    assert cli.main([*argv, "--out", str(tmp_path / "o4"), "--mirror"]) == 2
    assert "mirror averaging needs the 4-tensor model and a domain with a mirror" in capsys.readouterr().err


def test_a_rerun_does_not_load_models_to_fail_an_unchanged_broken_file_again(tmp_path, monkeypatch, capsys):
    from pipeline.batch import clip as batch_clip

    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "broken.mp4").write_bytes(b"not a video at all")
    out = tmp_path / "out"
    argv = ["batch", str(videos), "--out", str(out), "--stages", "caption", "--device", "cpu", "--no-progress",
            "--json"]  # fmt: skip
    assert cli.main(argv) == 1
    first = json.loads(capsys.readouterr().out)
    assert (
        first["clips"][0]["error"].startswith("decode: ") and first["clips_per_minute"] is None
    )  # none done
    monkeypatch.setattr(batch_clip, "load_pipeline", lambda *a, **k: pytest.fail("models were loaded"))
    assert cli.main(argv) == 1
    again = json.loads(capsys.readouterr().out)["clips"][0]
    assert "unchanged since the last run, so not read again" in again["error"]
    (videos / "broken.mp4").write_bytes(b"still not a video, but another file")  # changed: read again
    monkeypatch.undo()
    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    assert cli.main(argv) == 1
    assert "not read again" not in json.loads(capsys.readouterr().out)["clips"][0]["error"]
