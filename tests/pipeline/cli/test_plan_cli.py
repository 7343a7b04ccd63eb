"""`semworld plan` and `semworld eval plan` on tiny real Pong weights (a random predictor with actions): the plan
is printed and written, and every bad input is one line and exit 2 before any search; every command's --sticky
takes only a probability in [0, 1)."""

import json

import pytest

from pipeline.cli import main
from pipeline.domains.atari.record import ale_available
from tests.fakes import build_action_weights

STATES = ["ball 30 20 player 40 enemy 20 score 0 0 .", "ball 31 21 player 40 enemy 21 score 0 0 ."]


@pytest.fixture(scope="module")
def pong_weights(tmp_path_factory):
    return build_action_weights(tmp_path_factory.mktemp("pong-weights"))


@pytest.fixture
def history(tmp_path):
    (tmp_path / "h.txt").write_text("\n".join(STATES) + "\n")
    (tmp_path / "a.txt").write_text("up\n")
    return tmp_path


def test_plan_prints_and_writes_the_plan(pong_weights, history, capsys):
    out = history / "plan"
    rc = main(["plan", "--states", str(history / "h.txt"), "--actions", str(history / "a.txt"), "--goal",
               "player < 20", "--steps", "3", "--horizon", "3", "--candidates", "9", "--weights", str(pong_weights),
               "--out", str(out), "--threads", "1"])  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "goal: player < 20  (pong)" in text and "planning" in text
    doc = json.loads((out / "plan.json").read_text())
    assert len(doc["actions"]) == 3 and set(doc["actions"]) <= {"stay", "up", "down"}
    assert doc["observed_states"] == STATES and len(doc["steps"]) == 3
    assert all(len(s["forecast"]) == 3 and s["candidates"] == 9 for s in doc["steps"])


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--goal", "paddle < 3"], "'paddle' is not a field of the pong domain"),
        (["--goal", "player < 3", "--horizon", "40"], "--horizon: horizon must be an integer in 1..16"),
        (["--goal", "player < 3", "--steps", "0"], "steps must be an integer"),
    ],
)
def test_plan_refuses_bad_input_in_one_line(pong_weights, history, capsys, extra, says):
    rc = main(["plan", "--states", str(history / "h.txt"), "--weights", str(pong_weights), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


def test_plan_needs_a_domain_with_goals(tiny_weights, history, capsys):
    (history / "w.txt").write_text("red ball top left .\n")
    rc = main(["plan", "--states", str(history / "w.txt"), "--weights", str(tiny_weights), "--goal", "x < 3"])
    assert rc == 2 and "no fields or predicates" in capsys.readouterr().err


@pytest.mark.skipif(not ale_available(), reason="the Atari emulator (the atari extra) is not installed")
def test_eval_plan_plays_games_in_the_emulator(pong_weights, tmp_path, capsys):
    rc = main(["eval", "plan", "--weights", str(pong_weights), "--games", "1", "--max-steps", "30", "--horizon",
               "2", "--candidates", "3", "--references", "tracker", "--out", str(tmp_path / "r.json"),
               "--video", str(tmp_path / "g.mp4"), "--threads", "1"])  # fmt: skip
    assert rc == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["controllers"]) == {"planner", "tracker"}
    planner = result["controllers"]["planner"]
    assert planner["total"]["steps"] == 30 and planner["plan_ms"]["steps"] == 30
    assert (tmp_path / "g.mp4").stat().st_size > 1000
    assert "| planner |" in capsys.readouterr().out


@pytest.mark.skipif(not ale_available(), reason="the Atari emulator (the atari extra) is not installed")
def test_eval_plan_without_ram_plays_only_the_other_planner(pong_weights, tmp_path):
    rc = main(["eval", "plan", "--weights", str(pong_weights), "--no-ram", "--baseline", str(pong_weights / "predictor"),
               "--references", "--games", "1", "--max-steps", "5", "--horizon", "2", "--candidates", "3",
               "--out", str(tmp_path / "r.json"), "--video", str(tmp_path / "g.mp4"), "--threads", "1"])  # fmt: skip
    assert rc == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["controllers"]) == {"baseline-planner"}
    assert result["controllers"]["baseline-planner"]["plan_ms"]["steps"] == 5
    assert (tmp_path / "g.mp4").stat().st_size > 1000  # the video films the first planner played


def test_eval_plan_without_ram_needs_another_planner(pong_weights, capsys):
    rc = main(["eval", "plan", "--weights", str(pong_weights), "--no-ram", "--games", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--no-ram leaves no planner to play" in err and len(err.strip().splitlines()) == 1


def test_eval_plan_frames_needs_a_captioner(pong_weights, tmp_path, capsys):
    rc = main(["eval", "plan", "--weights", str(pong_weights), "--frames", "--games", "1", "--max-steps", "2",
               "--out", str(tmp_path / "r.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert (
        rc == 2 and "has no captioner/ to read the screens with" in err and len(err.strip().splitlines()) == 1
    )
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["world", "generate", "--domain", "pong", "--clips", "1"],
        ["eval", "actions", "--weights", "w"],
        ["eval", "plan", "--weights", "w"],
        ["eval", "compare", "--domain", "pong"],
    ],
)
@pytest.mark.parametrize("sticky", ["1", "-0.1", "often"])
def test_every_sticky_flag_refuses_what_is_not_a_probability(tmp_path, capsys, command, sticky):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--out", str(tmp_path / "out"), "--sticky", sticky])
    assert exit_.value.code == 2
    says = "'often' is not a number" if sticky == "often" else f"{sticky}: a probability in [0, 1)"
    assert f"argument --sticky: {says}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
