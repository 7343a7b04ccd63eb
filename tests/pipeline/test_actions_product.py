"""Actions through the product: the Python call, the CLI, the HTTP API and batch, on a stand-in predictor with
actions and on tiny real Pong weights (a predictor alone); a predictor of states alone refuses them."""

import json

import pytest

from pipeline.cli import main
from pipeline.outputs import state_fields, states_document
from pipeline.utils import UserError
from pipeline.world_model import WorldModelPipeline
from tests.fakes import (
    ActionEchoPredictor,
    BrightnessCaptioner,
    NoiseRenderer,
    build_action_weights,
    make_pipeline,
)

PONG = ["ball 10 20 player 5 enemy 7 score 0 0 .", "ball 11 19 player 5 enemy 8 score 0 0 ."]


@pytest.fixture
def echo():
    return WorldModelPipeline(
        BrightnessCaptioner(), ActionEchoPredictor(), NoiseRenderer(0.0), render_batch_size=2
    )


@pytest.fixture(scope="module")
def pong_weights(tmp_path_factory):
    return build_action_weights(tmp_path_factory.mktemp("pong-weights"))


def test_the_call_forecasts_under_the_given_actions(echo):
    out = echo(states=["a", "b"], horizon=3, actions=["up", "down", "up", None], render=False)
    assert out.predicted_states == ["after down", "after up", "after unknown"]
    assert out.actions == ["up", "down", "up", None]
    doc = states_document(out)
    assert doc["actions"] == out.actions and [s["action"] for s in doc["steps"]][:4] == out.actions
    assert state_fields(out)["actions"] == out.actions
    with pytest.raises(ValueError, match="'fly', not an action"):
        echo(states=["a"], horizon=2, actions=["fly"], render=False)
    # no actions: every forecast step reads unknown, and the output says so
    assert echo(states=["a"], horizon=2, render=False).actions == [None, None]


def test_a_predictor_of_states_alone_refuses_actions_and_is_unchanged():
    pipe = make_pipeline(0.0)
    with pytest.raises(ValueError, match="states alone"):
        pipe(states=["a"], horizon=2, actions=["up"], render=False)
    out = pipe(states=["a"], horizon=2, render=False)
    assert out.actions == [] and "actions" not in states_document(out) and "actions" not in state_fields(out)


def test_weights_with_a_predictor_alone_load_and_say_what_they_lack(pong_weights):
    pipe = WorldModelPipeline.from_pretrained(pong_weights, device="cpu")
    assert pipe.actions == ("stay", "up", "down") and pipe.domain.name == "pong"
    out = pipe(states=PONG, horizon=4, actions=["up", "down", "stay"], render=False)
    assert len(out.predicted_states) == 4
    assert out.actions == ["up", "down", "stay", None, None]
    with pytest.raises(ValueError, match="at most 5"):
        pipe(states=PONG, horizon=4, actions=["up"] * 6, render=False)
    with pytest.raises(UserError, match="no renderer"):
        pipe(states=PONG, horizon=2)
    with pytest.raises(UserError, match="no captioner"):
        pipe(b"not a clip", horizon=2, render=False)


def test_cli_predict_takes_an_actions_file(pong_weights, tmp_path, capsys):
    states, actions = tmp_path / "h.txt", tmp_path / "a.txt"
    states.write_text("\n".join(PONG) + "\n")
    actions.write_text("up\n?\ndown\n")
    argv = ["predict", "--states", str(states), "--actions", str(actions), "--weights", str(pong_weights),
            "--horizon", "3", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["actions"] == ["up", None, "down", None] and got["domain"] == "pong"
    assert json.loads((tmp_path / "out" / "states.json").read_text())["actions"] == got["actions"]
    actions.write_text("up\njump\n")
    assert main(argv) == 2
    assert "'jump', not an action" in capsys.readouterr().err
    actions.write_text("up down\n")
    assert main(argv) == 2
    assert "not one word" in capsys.readouterr().err
