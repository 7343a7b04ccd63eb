"""WorldModelPipeline with stand-in stages (structure, steps, errors) and with tiny real stages when they exist."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.outputs import make_strip, states_document, write_outputs, zip_outputs
from pipeline.utils import UserError
from pipeline.video import VideoLimits, read_video
from pipeline.world_model import WorldModelOutput, WorldModelPipeline
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer

ASSET = Path(__file__).resolve().parents[1] / "assets" / "bigbuckbunny_160x90.mp4"


@pytest.fixture
def pipe() -> WorldModelPipeline:
    return WorldModelPipeline(
        BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(), caption_batch_size=5, render_batch_size=3
    )


def test_clip_to_predicted_frames_runs_numbered_steps(pipe):
    events = []
    out = pipe(ASSET, horizon=4, stride=2, seed=3, encode_video=True, callback=lambda *e: events.append(e))
    assert isinstance(out, WorldModelOutput)
    assert len(out.observed_states) == 8 and out.source_indices == list(range(0, 16, 2))
    frames = read_video(ASSET, stride=2).frames
    assert out.observed_states == [f"a scene of brightness {int(f.mean()) // 16}." for f in frames]
    assert out.predicted_states == [f"next {i} after {out.observed_states[-1]}" for i in range(4)]
    assert len(out.predicted_frames) == 4 and out.predicted_frames[0].shape == (24, 32, 3)
    assert out.video is not None and out.video[4:8] == b"ftyp"
    assert out.state_rate == pytest.approx(6.25 / 2)
    # batched: 8 frames in batches of 5, 4 states in batches of 3
    assert pipe.captioner.batches == [5, 3] and pipe.renderer.batches == [3, 1]
    stages = [e[0] for e in events]
    assert stages.index("decode") < stages.index("caption") < stages.index("predict") < stages.index("render")
    assert ("caption", 8, 8) in events and ("render", 4, 4) in events and ("encode", 1, 1) in events
    assert set(out.timings) >= {"decode", "caption", "predict", "render", "encode", "total"}


def test_seed_makes_frames_reproducible(pipe):
    a = pipe(states=["a ball."], horizon=2, seed=7)
    b = pipe(states=["a ball."], horizon=2, seed=7)
    c = pipe(states=["a ball."], horizon=2, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a.predicted_frames, b.predicted_frames))
    assert not np.array_equal(a.predicted_frames[0], c.predicted_frames[0])


def test_from_states_skips_video(pipe):
    out = pipe(states=["  a red ball at the left.  ", "a red ball in the middle."], horizon=3, render=False)
    assert out.observed_states == ["a red ball at the left.", "a red ball in the middle."]
    assert out.observed_frames == [] and out.predicted_frames == [] and len(out.predicted_states) == 3
    assert "caption" not in out.timings and "decode" not in out.timings


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"states": ["x."], "horizon": 0}, "horizon: Input should be greater than or equal to 1, got 0"),
        ({"states": ["x."], "horizon": 33}, "horizon: Input should be less than or equal to 32, got 33"),
        ({"states": []}, "states is empty"),
        ({"states": ["x.", " "]}, r"states\[1\] must be a non-empty string"),
        ({}, "give exactly one of video or states"),
        ({"states": ["x."], "stride": 2, "state_rate": 1.0}, "either stride or state_rate"),
        ({"states": ["x."], "steps": 0}, "steps: Input should be greater than or equal to 1, got 0"),
        (
            {"states": ["x."], "guidance": 51.0},
            "guidance: Input should be less than or equal to 50, got 51.0",
        ),
        ({"states": ["x."], "horizon": True}, "horizon: Input should be a valid integer, got True"),
    ],
)
def test_check_inputs_names_the_argument(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pipe(**kwargs)


def test_too_many_sampled_frames_is_a_user_error():
    pipe = WorldModelPipeline(
        BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(), limits=VideoLimits(max_frames=4)
    )
    with pytest.raises(UserError, match="more than 4 states at stride 2"):
        pipe(ASSET, horizon=1, stride=2)
    assert len(pipe(ASSET, horizon=1, stride=4).observed_states) == 4


def test_a_stage_returning_the_wrong_count_is_caught(pipe):
    pipe.predictor = type("Short", (), {"predict": lambda self, s, k, truncate=False: [["only one."]]})()
    with pytest.raises(RuntimeError, match="predictor returned 1 states for horizon 3"):
        pipe(states=["x."], horizon=3)


def test_write_outputs_files(pipe, tmp_path):
    out = pipe(ASSET, horizon=3, stride=4, seed=0)
    files = write_outputs(out, tmp_path / "o")
    assert [p.name for p in files.predicted_frames] == [
        "predicted_000.png",
        "predicted_001.png",
        "predicted_002.png",
    ]
    assert np.array_equal(np.asarray(Image.open(files.predicted_frames[1])), out.predicted_frames[1])
    assert len(files.observed_frames) == 4
    doc = json.loads(files.states.read_text())
    assert doc["observed_states"] == out.observed_states and doc["predicted_states"] == out.predicted_states
    assert [s["kind"] for s in doc["steps"]] == ["observed"] * 4 + ["predicted"] * 3
    assert doc["steps"][2]["frame_index"] == 8
    decoded = read_video(files.video)
    assert len(decoded.frames) == 3 and decoded.size == (32, 24)
    strip = np.asarray(Image.open(files.strip))
    assert strip.shape[1] > 7 * 128 and strip.shape[0] > 112
    assert not list(tmp_path.glob("o/.*.tmp"))  # no temporary files left behind


def test_zip_has_everything(pipe):
    import io
    import zipfile

    out = pipe(states=["a.", "b."], horizon=2, seed=0)
    names = zipfile.ZipFile(io.BytesIO(zip_outputs(out))).namelist()
    assert set(names) == {
        "predicted_000.png",
        "predicted_001.png",
        "predicted.mp4",
        "context_forecast.mp4",
        "states.json",
        "strip.png",
    }
    assert states_document(out)["steps"][0] == {
        "step": 0,
        "kind": "observed",
        "state": "a.",
        "frame_index": None,
        "confidence": None,  # given in words: nothing was read
        "parses": None,
        "changes": [],
    }


def test_strip_without_observed_frames():
    img = make_strip([], ["a."], [np.zeros((10, 20, 3), np.uint8)], ["b."], height=40)
    # two tiles at least 128 px wide, each followed by 2 px, with the 6-px bar where the forecast begins
    assert img.shape[1] == 2 * (128 + 2) + 6 and img.shape[0] > 40
    assert img[5, 100].tolist() == [255, 255, 255]  # the observed state has no frame: a blank tile
    assert img[20, 130:134].tolist().count([200, 60, 60]) == 4  # the red bar between observed and predicted
    # The predicted (black, 2:1) frame fitted into its 128x40 tile, aspect kept: 80 px wide, white beside it.
    assert img[20, 136 + 64].tolist() == [0, 0, 0] and img[20, 136 + 10].tolist() == [255, 255, 255]
    with pytest.raises(ValueError, match="nothing to draw"):
        make_strip([], [], [], [])


def test_from_pretrained_errors_name_the_directory(tmp_path):
    with pytest.raises(UserError, match="weights .*nope: no such directory"):
        WorldModelPipeline.from_pretrained(tmp_path / "nope")
    with pytest.raises(UserError, match="no model_index.json"):
        WorldModelPipeline.from_pretrained(tmp_path)
    (tmp_path / "model_index.json").write_text("{nope")
    with pytest.raises(UserError, match="not valid JSON"):
        WorldModelPipeline.from_pretrained(tmp_path)


# ---- `semworld predict` -------------------------------------------------------------------------------------
@pytest.fixture
def fake_weights(monkeypatch, pipe, tmp_path):
    """Stand-in stages for `semworld predict`; tmp_path is a weights folder whose stage folders are empty (the
    CLI checks the folders before it loads anything)."""
    seen = {}
    for stage in ("captioner", "predictor", "renderer"):
        (tmp_path / stage).mkdir()
    (tmp_path / "model_index.json").write_text('{"captioner": "captioner", "predictor": "predictor", '
                                               '"renderer": "renderer"}')  # fmt: skip

    def load(weights_dir, **kwargs):
        seen["dir"], seen["kwargs"] = weights_dir, kwargs
        return pipe

    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(load))
    return seen


def test_cli_predict_clip_json(fake_weights, tmp_path, capsys):
    from pipeline import cli

    rc = cli.main([
        "predict", str(ASSET), "--horizon", "3", "--stride", "4", "--out", str(tmp_path / "o"),
        "--weights", str(tmp_path), "--json",
    ])  # fmt: skip
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["observed_states"]) == 4 and len(doc["predicted_states"]) == 3
    assert [Path(p).name for p in doc["frames"]] == [f"predicted_{j:03d}.png" for j in range(3)]
    assert Path(doc["video"]).is_file() and Path(doc["video"]).read_bytes()[4:8] == b"ftyp"
    assert fake_weights["dir"] == tmp_path


def test_cli_predict_from_states_file(fake_weights, tmp_path, capsys):
    from pipeline import cli

    # The shipped weights' index names the world grammar: states in words are world sentences.
    states = tmp_path / "states.txt"
    states.write_text("# what if the ball went left?\nred ball top left .\n\nRed ball middle left.\n")
    assert cli.main(["predict", "--states", str(states), "-k", "2", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "read 2 states from" in text and "t=3   next 1 after Red ball middle left." in text
    assert (
        json.loads((tmp_path / "o" / "states.json").read_text())["observed_states"][0]
        == "red ball top left ."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["predict", "--out", "o"], "give either a CLIP or --states FILE"),
        (["predict", "/nope.mp4", "--out", "o"], "/nope.mp4: no such file"),
        (["predict", "--states", "/nope.txt", "--out", "o"], "--states /nope.txt: no such file"),
    ],
)
def test_cli_predict_errors_are_one_line(fake_weights, capsys, argv, message):
    from pipeline import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("semworld: error: ") and message in err and "\n" not in err


def test_cli_predict_help_names_every_file_it_writes(fake_weights, tmp_path, capsys):
    import re

    from pipeline import cli

    index = json.loads((tmp_path / "model_index.json").read_text())
    (tmp_path / "model_index.json").write_text(
        json.dumps({**index, "grammar": "world"})
    )  # truth frames drawn
    truth = tmp_path / "truth.txt"
    truth.write_text("red ball top left .\n" * 8)
    out = tmp_path / "o"
    argv = ["predict", str(ASSET), "-k", "2", "--stride", "4", "--context", "2", "--truth", str(truth),
            "--weights", str(tmp_path), "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    written = {re.sub(r"_\d{3}\.", "_NNN.", p.name) for p in out.iterdir()}
    assert written == {"predicted_NNN.png", "observed_NNN.png", "predicted.mp4", "context_forecast.mp4",
                       "forecast_vs_truth.mp4", "states.json", "strip.png"}  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["predict", "--help"])
    description = " ".join(capsys.readouterr().out.split("positional arguments")[0].split())
    assert [name for name in sorted(written) if name not in description] == []


def test_cli_predict_bad_clip_is_one_line_that_names_it(fake_weights, tmp_path, capsys, monkeypatch):
    from pipeline import cli

    monkeypatch.chdir(tmp_path)
    Path("bad.mp4").write_bytes(b"not a video" * 50)
    assert cli.main(["predict", "bad.mp4", "--out", "o"]) == 2  # `semworld predict bad.mp4 --out o`
    assert capsys.readouterr().err == "semworld: error: bad.mp4: not a readable video\n"


def test_cli_predict_too_long_a_clip_is_named_once(fake_weights, tmp_path, capsys):
    from pipeline import cli

    assert (
        cli.main(["predict", str(ASSET), "--stride", "1", "--max-frames", "3", "--out", str(tmp_path)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"semworld: error: {ASSET}: clip gives more than 3 states at stride 1")
    assert err.count(str(ASSET)) == 1 and err.rstrip().endswith(
        "(or raise --max-frames); no model was loaded"
    )


# ---- tiny random real stages, loaded from a weights folder like the shipped one -------------------------------
def test_from_pretrained_runs_real_tiny_stages(tiny_weights, tmp_path):
    from pipeline.captioner import Captioner
    from pipeline.predictor import Predictor
    from pipeline.renderer import Renderer

    pipe = WorldModelPipeline.from_pretrained(tiny_weights, device="cpu")
    pipe.warmup()  # a blank frame captions to a long state: warmup must cut it, not fail
    assert isinstance(pipe.captioner, Captioner) and isinstance(pipe.predictor, Predictor)
    assert isinstance(pipe.renderer, Renderer)
    out = pipe(ASSET, horizon=2, stride=8, seed=0, encode_video=True)  # out of domain: still a valid answer
    assert len(out.observed_states) == 2 and all(isinstance(s, str) for s in out.observed_states)
    assert len(out.predicted_states) == 2 and len(out.predicted_frames) == 2
    assert out.predicted_frames[0].dtype == np.uint8 and out.predicted_frames[0].shape[2] == 3
    # What-if from states in words: greedy predictor and a seeded renderer give the same future twice.
    a, b = (pipe(states=out.predicted_states, horizon=2, seed=0) for _ in range(2))
    assert a.predicted_states == b.predicted_states and np.array_equal(
        a.predicted_frames[0], b.predicted_frames[0]
    )
    # a state a user wrote is never cut silently, and is refused with advice a user can act on
    with pytest.raises(
        UserError,
        match=r"states\[0\] has 21 words and marks; the predictor reads at most 12 per state: shorten",
    ):
        pipe(states=["red " * 20 + "."], horizon=1)
    files = write_outputs(out, tmp_path)
    assert len(read_video(files.video).frames) == 2


def test_from_pretrained_names_a_missing_stage_folder(tiny_weights, tmp_path):
    import shutil

    broken = tmp_path / "w"
    shutil.copytree(tiny_weights, broken)
    shutil.rmtree(broken / "renderer")
    with pytest.raises(
        UserError, match=r"w/renderer: missing folder for the renderer named in model_index.json"
    ):
        WorldModelPipeline.from_pretrained(broken)
    (broken / "model_index.json").write_text('{"captioner": "captioner"}')
    with pytest.raises(UserError, match="no 'predictor' entry"):
        WorldModelPipeline.from_pretrained(broken)


def test_cli_predict_context_and_truth(fake_weights, tmp_path, capsys):
    from pipeline import cli

    frames = read_video(ASSET, stride=4).frames
    read = [f"a scene of brightness {int(f.mean()) // 16}." for f in frames]
    truth = tmp_path / "truth.txt"
    truth.write_text("\n".join([read[0], "something else.", read[2], f"next 0 after {read[2]}", "x."]) + "\n")
    argv = ["predict", str(ASSET), "--stride", "4", "--context", "3", "-k", "2", "--truth", str(truth)]
    assert cli.main([*argv, "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "read 3 states from" in text and "truth something else." in text
    assert f"t=3   = next 0 after {read[2]}" in text and "t=4   x next 1 after" in text
    assert "read correctly: 2/3; predicted correctly: 1/2" in text
    with pytest.raises(ValueError, match="context: Input should be greater than or equal to 1, got 0"):
        WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer())(ASSET, context=0)


def test_tiny_real_stages_give_pinned_numbers(tiny_weights):
    """As diffusers' expected_slice: the seeded tiny random stages give exactly these outputs, so a silent change
    of behaviour anywhere on the path (loading, tokenizing, rollout, sampling, resizing) fails here."""
    pipe = WorldModelPipeline.from_pretrained(tiny_weights, device="cpu")
    import world

    frames = [world.render_state(s, size=64) for s in ("red ball top left .", "empty .")]
    # weights that name no domain: free text, as long as the checkpoint's generation config allows (18 tokens)
    assert pipe.captioner.max_new_tokens == 18
    assert pipe.caption(frames)[0] == "! right green top orange , , , , off blue blue ? blue blue blue blue"
    out = pipe(states=["red ball top left .", "red ball upper left .", "red ball middle left ."], horizon=2, seed=0,
               steps=2)  # fmt: skip
    assert out.predicted_states == ["on !", "[UNK] !"]
    frame = out.predicted_frames[0]
    assert frame.shape == (32, 32, 3)
    assert frame[10, :6, 0].tolist() == [120, 119, 134, 163, 174, 126]
    assert frame[20, 20].tolist() == [133, 188, 222]
    assert float(frame.mean()) == pytest.approx(135.085, abs=1e-3)
