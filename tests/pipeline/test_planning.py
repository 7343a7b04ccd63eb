"""Goals in words and the planner: parsing against a domain, scoring forecasts, the batched rollout with shared
prefixes, and planning on a stand-in Pong predictor with known physics."""

import numpy as np
import pytest

from pipeline.domain import get_domain
from pipeline.goals import GoalError, flatten, parse_goal, state_fields
from pipeline.planning import PlanConfig, Planner
from pipeline.predictor import Predictor
from pipeline.utils import UserError
from pipeline.world_model import WorldModelPipeline
from tests.fakes import EchoPredictor, NoiseRenderer, PongPhysicsPredictor, build_action_weights

PONG = get_domain("pong")


def fields(text: str) -> dict:
    got = state_fields(PONG, text)
    assert got is not None
    return got


def test_flatten_reads_nested_fields_lists_and_absent_paths():
    parsed = {"ball": None, "player": 3, "score": {"player": 1}, "cars": [5, 6]}
    got = flatten(parsed, ("ball x", "player", "score player", "cars 1", "cars 9"))
    assert got == {"ball x": None, "player": 3, "score player": 1, "cars 1": 6, "cars 9": None}


def test_a_condition_scores_its_distance_and_holds_at_zero():
    goal = parse_goal("player < 20", PONG)
    now = fields("ball 20 30 player 30 enemy 30 score 0 0 .")
    far, near = (
        fields("ball 21 31 player 27 enemy 31 score 0 0 ."),
        fields("ball 21 31 player 19 enemy 31 score 0 0 ."),
    )
    assert goal.cost(now, [far], ["up"]) == pytest.approx(8.0)  # 27 -> below 20: 7 units and the strict one
    assert not goal.holds(now, [far], ["up"])
    assert goal.cost(now, [far, near], ["up", "up"]) == pytest.approx(0.01)  # holds at the second step
    assert goal.holds(now, [far, near], ["up", "up"])


def test_relations_modes_and_partial_states():
    now = fields("ball 20 30 player 30 enemy 30 score 0 0 .")
    on_line = fields("ball 21 31 player 29 enemy 31 score 0 0 .")
    goal = parse_goal("player = ball y - 2", PONG)
    assert goal.holds(now, [on_line], ["up"])
    always = parse_goal("always player > 29", PONG)
    assert not always.holds(now, [on_line, now], ["up", "stay"])
    assert always.cost(now, [on_line, now], ["up", "stay"]) == pytest.approx(0.5)  # one step 1 short of > 29
    partial = parse_goal("ball * * player 29 enemy * score * * .", PONG)
    (clause,) = partial.clauses
    assert [c.field for c in clause.conditions] == ["player"]
    assert partial.holds(now, [on_line], ["up"])
    assert not parse_goal("finally player = 29", PONG).holds(now, [on_line, now], ["up", "stay"])


@pytest.mark.parametrize(
    ("goal", "says"),
    [
        ("paddle < 3", "'paddle' is not a field of the pong domain"),
        ("fly to the moon", "not a predicate of the pong domain"),
        ("return the ball and", "one side is empty"),
        ("player < ball z", "'ball z' is not a field"),
        ("ball * * player * enemy * score * * .", "asks for nothing"),
        ("ball * * player 99 .", "not a partial state of the pong domain"),
        ("   ", "expected a goal in words"),
    ],
)
def test_goals_that_mean_nothing_in_the_domain_are_refused_by_name(goal, says):
    with pytest.raises(GoalError, match=says):
        parse_goal(goal, PONG)


def test_a_domain_without_fields_or_goals_cannot_plan():
    with pytest.raises(GoalError, match="no fields or predicates"):
        parse_goal("anything < 3", get_domain("text"))


def test_the_fast_batched_rollout_equals_predict_under(tmp_path):
    """The shared-prefix rollout (one forward per distinct prefix) gives every candidate the forecast that
    predict_under gives it alone."""
    predictor = Predictor.from_pretrained(build_action_weights(tmp_path) / "predictor", domain=PONG)
    planner = Planner(predictor, PONG, "player < 20", PlanConfig(horizon=4, candidates=20))
    assert planner._fast
    history = ["ball 20 30 player 30 enemy 30 score 0 0 .", "ball 21 31 player 30 enemy 31 score 0 0 ."]
    seqs = np.concatenate([planner.structured(), planner.draw(np.full((4, 3), 1 / 3), 11)])
    fast = planner.rollout(history, ["up"], seqs)
    slow, _ = predictor.predict_under(
        [history] * len(seqs), 4, [["up", *(planner.actions[a] for a in s)] for s in seqs]
    )
    assert fast == [list(s) for s in slow]


def test_structured_candidates_hold_then_switch():
    planner = Planner(PongPhysicsPredictor(), PONG, "player < 20", PlanConfig(horizon=3))
    rows = {tuple(r) for r in planner.structured().tolist()}
    assert (0, 0, 0) in rows and (1, 2, 2) in rows and len(rows) == 3 + 6


HISTORY = ["ball 30 20 player 40 enemy 20 score 0 0 .", "ball 31 21 player 40 enemy 21 score 0 0 ."]


@pytest.mark.parametrize("method", ["shooting", "cem"])
def test_the_planner_moves_the_paddle_to_a_field_goal(method):
    planner = Planner(
        PongPhysicsPredictor(), PONG, "player < 30", PlanConfig(horizon=4, candidates=12, method=method)
    )
    step = planner.step(HISTORY, ["stay"])
    assert step.action == "up" and step.holds  # 40 -> 37 -> ... below 30 within 4 steps: only by going up
    plan = planner.plan(HISTORY, ["stay"], 6)
    assert plan.actions[:4] == ["up"] * 4 and plan.reached == 4  # 37, 34, 31, 28
    assert fields(plan.states[3])["player"] == 28


def test_the_planner_returns_a_ball_it_would_otherwise_miss():
    """The ball comes down towards the paddle's right edge: held still the paddle misses it (a point lost in
    the stand-in's physics); the plan for "return the ball" meets it and sends it back."""
    history = ["ball 38 20 player 12 enemy 20 score 0 0 .", "ball 39 21 player 12 enemy 21 score 0 0 ."]
    physics = PongPhysicsPredictor()
    still, _ = physics.predict_under([history], 12, [["stay"] * 13])
    assert fields(still[0][-1])["score enemy"] == 1
    plan = Planner(physics, PONG, "return the ball", PlanConfig(horizon=10, candidates=27)).plan(
        history, ["stay"], 12
    )
    assert plan.reached is not None
    assert all(fields(s)["score enemy"] == 0 for s in plan.states)


def test_the_draws_follow_the_seed():
    """The random candidates (and so a plan where they decide) repeat with the seed and differ without it."""

    def draws(seed: int) -> np.ndarray:
        planner = Planner(PongPhysicsPredictor(), PONG, "player < 3", PlanConfig(horizon=6, seed=seed))
        return planner.draw(np.full((6, 3), 1 / 3), 50)

    assert (draws(3) == draws(3)).all() and not (draws(3) == draws(4)).all()
    planner = Planner(PongPhysicsPredictor(), PONG, "player < 3", PlanConfig(horizon=6, seed=3))
    first = planner.draw(np.full((6, 3), 1 / 3), 5)
    planner.reseed()
    assert (planner.draw(np.full((6, 3), 1 / 3), 5) == first).all()


def test_a_partial_state_costs_its_fields_at_one_step():
    goal = parse_goal("ball * * player 29 enemy 31 score * * .", PONG)
    now = fields("ball 20 30 player 30 enemy 30 score 0 0 .")
    apart = [
        fields("ball 21 31 player 29 enemy 30 score 0 0 ."),
        fields("ball 22 31 player 30 enemy 31 score 0 0 ."),
    ]
    together = [fields("ball 21 31 player 29 enemy 31 score 0 0 .")]
    assert not goal.holds(now, apart, ["up", "down"]) and goal.cost(now, apart, ["up", "down"]) >= 1.0
    assert goal.holds(now, together, ["up"]) and goal.cost(now, together, ["up"]) == 0.0


def test_plan_config_limits():
    with pytest.raises(ValueError, match="horizon must be an integer in 1..16"):
        PlanConfig(horizon=0)
    with pytest.raises(ValueError, match="method must be one of shooting, cem"):
        PlanConfig(method="annealing")


def test_planning_needs_a_predictor_with_actions():
    with pytest.raises(UserError, match="planning needs one with actions"):
        Planner(EchoPredictor(), PONG, "player < 3")
    pipe = WorldModelPipeline(None, EchoPredictor(), NoiseRenderer(0.0), domain="pong")
    with pytest.raises(UserError, match="planning needs one with actions"):
        pipe.plan(states=HISTORY, goal="player < 3")


def test_the_pipeline_plans_from_states_and_refuses_before_any_model_runs():
    pipe = WorldModelPipeline(None, PongPhysicsPredictor(), NoiseRenderer(0.0), domain="pong")
    out = pipe.plan(states=HISTORY, goal="player < 30", steps=4, config=PlanConfig(horizon=4), render=False)
    assert out.actions == ["up"] * 4 and out.reached == 4 and out.domain == "pong"
    assert out.observed_states == HISTORY and len(out.predicted_states) == 4 and not out.predicted_frames
    drawn = pipe.plan(states=HISTORY, goal="player < 30", steps=2, render=True)
    assert len(drawn.predicted_frames) == 2
    with pytest.raises(GoalError, match="not a field"):
        pipe.plan(states=HISTORY, goal="paddle < 30")
    with pytest.raises(ValueError, match="at most one after each state but the last"):
        pipe.plan(states=HISTORY, actions=["up", "up"], goal="player < 30")
    with pytest.raises(ValueError, match="not an action of this predictor"):
        pipe.plan(states=HISTORY, actions=["jump"], goal="player < 30")
