"""`semworld eval actions`: episodes with counterfactual futures from the real emulator, and the scoring."""

import dataclasses

import numpy as np
import pytest

from pipeline.domain import get_domain
from pipeline.domains.atari.games import QUANTUM
from pipeline.evaluation.actions import (
    _hidden_steps,
    constant_velocity,
    record_episodes,
    score_counterfactuals,
    score_forecasts,
)


def test_constant_velocity_moves_every_number_on():
    h = ["ball 10 20 player 5 enemy 7 score 0 0 .", "ball 11 18 player 5 enemy 8 score 0 0 ."]
    assert constant_velocity(h, 1) == "ball 12 16 player 5 enemy 9 score 0 0 ."
    assert constant_velocity(h, 10) == "ball 21 0 player 5 enemy 18 score 0 0 ."  # clamped at 0
    came = ["ball none player 5 enemy 7 score 0 0 .", "ball 11 18 player 5 enemy 8 score 0 0 ."]
    assert constant_velocity(came, 3) == came[-1]  # words do not line up: copied


@pytest.fixture(scope="module")
def episodes():
    pytest.importorskip("ale_py")
    return record_episodes(get_domain("pong"), 4, T=4, horizon=6, seed=0, variants=0)


def test_episodes_hold_a_history_and_each_future(episodes):
    ep = episodes[0]
    assert len(ep.history) == 4 and len(ep.actions) == 3
    assert set(ep.futures) == {"logged", "all up", "all down", "all stay"}
    assert ep.futures["all up"][0] == ["up"] * 6
    assert all(len(states) == 6 for _, states in ep.futures.values())
    again = record_episodes(get_domain("pong"), 4, T=4, horizon=6, seed=0, variants=0)
    assert [e.futures for e in again] == [e.futures for e in episodes]  # seeded, and restores are exact


def test_episodes_are_played_by_the_policy_asked_for():
    d = get_domain("freeway")
    mix, runs = (record_episodes(d, 6, T=8, horizon=4, seed=0, policy=p, variants=0) for p in ("mix", "runs"))
    assert [e.actions for e in mix] != [e.actions for e in runs]
    assert [e.futures["all up"] for e in mix] != [e.futures["all up"] for e in runs]  # other histories


def test_scores_are_one_for_the_truth_and_less_for_copy_last(episodes):
    d = get_domain("pong")
    truth = [ep.futures["logged"][1] for ep in episodes]
    r = score_forecasts(d, episodes, truth, quantum=4)
    assert r["exact"] == [1.0] * 6 and r["position_error"] == [0.0] * 6
    assert all(v == [1.0] * 6 for v in r["fields"].values())
    copy = score_forecasts(d, episodes, [[ep.history[-1]] * 6 for ep in episodes], quantum=4)
    assert copy["exact"][-1] < 1.0 and copy["position_error"][-1] > 0
    held = {n: [ep.futures[n][1] for ep in episodes] for n in ("all up", "all down")}
    cf = score_counterfactuals(d, episodes, held)
    assert cf["all up"]["exact"] == [1.0] * 6 and cf["all down"]["controlled_direction"] == [1.0] * 6
    swapped = score_counterfactuals(d, episodes, {"all up": held["all down"]})
    assert swapped["all up"]["controlled_exact"][-1] < 1.0


def _report(result: dict) -> str:
    from pipeline.cli.eval_actions import format_report

    return format_report(result)


def test_cli_scores_a_game_predictor_and_refuses_one_without_actions(tmp_path, capsys, tiny_weights):
    import json

    from pipeline.cli import main
    from tests.fakes import build_action_weights

    pytest.importorskip("ale_py")
    weights = build_action_weights(tmp_path / "pong")
    figure = tmp_path / "h.png"
    argv = ["eval", "actions", "--weights", str(weights), "--episodes", "3", "--horizon", "3"]
    assert main([*argv, "--json", "--figure", str(figure)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["domain"] == "pong" and got["episodes"] == 3
    assert set(got["logged"]) == {"semworld", "copy-last", "constant velocity"}
    assert set(got["counterfactual"]) == {"all up", "all down", "all stay"}
    assert figure.stat().st_size > 1000
    assert main(argv) == 0 and "| semworld |" in capsys.readouterr().out
    assert main(["eval", "actions", "--weights", str(tiny_weights), "--episodes", "1"]) == 2
    assert "states alone" in capsys.readouterr().err
    assert main([*argv, "--policy", "walks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--policy" in err and "runs" in err
    assert main([*argv, "--policy", "runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "runs"
    # the report says how many variants were tried: none under sticky actions, where there is no such test
    assert got["variants"] == 256 and "; determined: " in _report(got)
    assert main([*argv, "--sticky", "0.25", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["variants"] == 0


def test_variants_read_as_the_console_does_with_positions_moved_inside_their_bins():
    pytest.importorskip("ale_py")
    pong = get_domain("pong")
    emu, _ = pong.simulator(0, seed=0)
    ram, now, snapshot = emu.ram().copy(), emu.state(), emu.clone()
    variants = emu.variants(1000, np.random.default_rng(0))
    assert len(variants) > 20 and len({tuple(sorted(v.items())) for v in variants}) == len(variants)
    for writes in variants:
        assert set(writes) <= set(pong.game.positions)
        assert all(0 < abs(value - int(ram[a])) < QUANTUM for a, value in writes.items())
        emu.restore(snapshot)
        emu.write_ram(writes)
        assert emu.state() == now
    assert len(emu.variants(5, np.random.default_rng(0))) == 5  # a sample when there are more


def test_hidden_steps_come_only_from_consoles_that_read_as_the_history():
    pytest.importorskip("ale_py")
    pong = get_domain("pong")
    eps = record_episodes(pong, 12, T=8, horizon=8, seed=0, variants=64)
    assert all(len(ep.hidden) == 8 for ep in eps)
    first_step, last_step = (sum(ep.hidden[h] for ep in eps) for h in (0, -1))
    assert 0 < last_step and first_step <= last_step  # what the bins hide tells more the longer it plays
    assert all(ep.hidden == [] for ep in record_episodes(pong, 2, T=8, horizon=8, seed=0, variants=0))
    # a console whose ball is a bin away reads otherwise from the first state on: it is no evidence
    ep = eps[0]
    emu, _ = pong.simulator(0, seed=0)
    first = emu.clone()
    moved = {54: int(emu.ram()[54]) + QUANTUM} if emu.ram()[54] else {51: int(emu.ram()[51]) + QUANTUM}
    assert _hidden_steps(emu, first, [moved], ep) == [False] * 8


def test_targets_not_determined_are_scored_apart(episodes):
    d = get_domain("pong")
    wrong = "ball 1 1 player 1 enemy 1 score 0 0 ."
    forecasts = [[wrong] * 6] + [ep.futures["logged"][1] for ep in episodes[1:]]
    hidden = [[True] * 6] + [[False] * 6] * (len(episodes) - 1)
    apart = [dataclasses.replace(ep, hidden=h) for ep, h in zip(episodes, hidden, strict=True)]
    r = score_forecasts(d, apart, forecasts, quantum=4)
    assert r["exact"][0] == 0.75 and r["exact_determined"][0] == 1.0
    assert r["hidden_share"] == [0.25] * 6 and r["undetermined_share"][0] >= 0.25
    # by field too: the wrong paddle of the hidden episode counts over all targets, not over the determined ones
    assert r["fields"]["player"][0] < 1.0 and r["fields_determined"]["player"][0] == 1.0
    assert r["fields_within_one"]["player"][0] < 1.0 and r["fields_within_one_determined"]["player"][0] == 1.0
