"""POST /v1/plan: a goal in words and states in, the plan out; goals, states and actions that mean nothing in the
weights' domain are a 422 before any work, and weights of states alone cannot plan."""

import pytest

from pipeline.world_model import WorldModelPipeline
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer, PongPhysicsPredictor

STATES = ["ball 30 20 player 40 enemy 20 score 0 0 .", "ball 31 21 player 40 enemy 21 score 0 0 ."]


@pytest.fixture
def pong():
    return WorldModelPipeline(
        BrightnessCaptioner(), PongPhysicsPredictor(), NoiseRenderer(0.0), domain="pong"
    )


def test_api_plan_returns_the_plan_and_its_frames(make_client, pong):
    client = make_client(pong)
    body = {"states": STATES, "actions": ["stay"], "goal": "player < 30", "steps": 4, "horizon": 4}
    r = client.post("/v1/plan", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["actions"] == ["up"] * 4 and got["reached"] == 4 and got["domain"] == "pong"
    assert len(got["predicted_states"]) == 4 and len(got["frames"]) == 4  # the weights have a renderer
    assert got["steps"][0]["sequence"] == ["up"] * 4 and got["steps"][0]["holds"]
    quiet = client.post("/v1/plan", json={**body, "render": False})
    assert quiet.status_code == 200 and quiet.json()["frames"] == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"goal": "paddle < 3"}, "'paddle' is not a field of the pong domain"),
        ({"goal": "fly"}, "not a predicate of the pong domain"),
        ({"states": ["ball 30 20 player ."]}, "states"),
        ({"actions": ["jump"]}, "not an action of this predictor"),
        ({"horizon": 40}, "less than or equal to 16"),
        ({"method": "annealing"}, "shooting"),
    ],
)
def test_api_plan_refuses_what_means_nothing_here(make_client, pong, change, says):
    r = make_client(pong).post("/v1/plan", json={"states": STATES, "goal": "player < 30", **change})
    assert r.status_code == 422 and says in str(r.json()["detail"]), r.text


def test_api_plan_needs_a_domain_with_goals_and_a_predictor_with_actions(make_client):
    r = make_client().post("/v1/plan", json={"states": ["a ."], "goal": "return the ball"})
    assert r.status_code == 422 and "no fields or predicates" in r.json()["detail"]
    states_alone = WorldModelPipeline(
        BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(0.0), domain="pong"
    )
    r = make_client(states_alone).post("/v1/plan", json={"states": STATES, "goal": "player < 3"})
    assert r.status_code == 422 and "planning needs actions" in r.json()["detail"]
