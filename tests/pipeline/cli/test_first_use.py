"""What a new user hits first: defaults that fit the shipped models, and checks made before any model loads."""

import shutil
from pathlib import Path

import pytest
import torch

from pipeline import cli
from pipeline.cli.demo import as_predicted
from pipeline.tokenizer import StateTokenizer
from tests.pipeline.cli.test_commands import _error

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers


@pytest.fixture(autouse=True)
def no_debug(monkeypatch):
    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)


def test_demo_compares_truth_in_the_rollouts_spelling():
    tok = StateTokenizer.build(["red ball top left , lamp on .", "blue box lower right ."])
    ids = tok.encode_states(["red ball top left , lamp on ."], 16).ids[0]
    predicted = tok.spell(ids)  # what Predictor.predict returns
    assert as_predicted(tok, "red ball top left , lamp on .", 16) == predicted
    assert tok.decode(ids) != predicted  # the spelling the demo used to compare with (0/12 matched)


def test_world_generate_defaults_to_every_scenario():
    args = cli.build_parser().parse_args(["world", "generate", "--clips", "1", "--out", "x"])
    assert args.scenario == "all"


ASSET = Path(__file__).resolve().parents[2] / "assets" / "bigbuckbunny_160x90.mp4"  # 16 frames, 2.4 s


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if the CLI gets as far as loading models."""
    from pipeline.world_model import WorldModelPipeline

    def load(*args, **kwargs):
        pytest.fail("models were loaded before the input was checked")

    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(load))


def test_a_clip_over_the_limit_is_refused_before_models_load(no_loading, tmp_path, capsys):
    argv = ["predict", str(ASSET), "--out", str(tmp_path / "o"), "--max-frames", "3"]
    err = _error(capsys, argv)  # the shipped weights' 2 states per second give 5 states
    assert "more than 3 states at state rate 2 Hz" in err and "--max-frames" in err and "no model" in err
    err = _error(capsys, [*argv[:-1], "8", "--stride", "1"])
    assert "more than 8 states at stride 1" in err


def test_a_device_this_machine_lacks_is_one_line_before_models_load(
    no_loading, states_file, tmp_path, capsys
):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    err = _error(
        capsys, ["predict", "--states", str(states_file), "--device", "cuda", "--out", str(tmp_path / "o")]
    )
    assert err == "semworld: error: --device cuda: CUDA is not available on this machine"


def test_predict_loads_single_stages_from_their_own_folders(tiny_weights, tmp_path, monkeypatch, capsys):
    from pipeline.world_model import WorldModelPipeline

    seen = {}

    def load(weights_dir, **kwargs):
        seen.update(kwargs, weights=weights_dir)
        raise SystemExit(0)

    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(load))
    weights = tmp_path / "w"
    shutil.copytree(tiny_weights, weights, ignore=shutil.ignore_patterns("predictor"))
    mine = tiny_weights / "predictor"
    with pytest.raises(SystemExit):
        cli.main(["predict", str(ASSET), "--weights", str(weights), "--predictor", str(mine), "--stride", "8",
                  "--out", str(tmp_path / "o")])  # fmt: skip
    assert seen["weights"] == weights and seen["predictor"] == mine and seen["renderer"] is None
    err = _error(capsys, ["predict", str(ASSET), "--weights", str(weights), "--out", str(tmp_path / "o")])
    assert "missing folder for the predictor" in err  # without --predictor the index's folder is needed
