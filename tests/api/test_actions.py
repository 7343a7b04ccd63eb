"""Actions through the HTTP API: /v1/rollout and /v1/predict on a stand-in predictor with actions; a predictor of
states alone refuses them with a 422."""

import pytest

from pipeline.world_model import WorldModelPipeline
from tests.fakes import ActionEchoPredictor, BrightnessCaptioner, NoiseRenderer


@pytest.fixture
def echo():
    return WorldModelPipeline(
        BrightnessCaptioner(), ActionEchoPredictor(), NoiseRenderer(0.0), render_batch_size=2
    )


def test_api_rollout_and_predict_take_actions(make_client, echo, world_clip):
    client = make_client(echo)
    r = client.post("/v1/rollout", json={"states": ["a", "b"], "horizon": 2, "actions": ["up", "down", "stay"],
                                         "render": False})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["predicted_states"] == ["after down", "after stay"]
    assert r.json()["actions"] == ["up", "down", "stay"]
    bad = client.post("/v1/rollout", json={"states": ["a"], "actions": ["jump"], "render": False})
    assert bad.status_code == 422 and "jump" in bad.json()["detail"]
    with world_clip.open("rb") as f:
        r = client.post(
            "/v1/predict", files={"file": f}, data={"horizon": "2", "stride": "10", "actions": "up, ?"}
        )
    assert r.status_code == 200, r.text
    assert r.json()["actions"][:2] == ["up", None]


def test_api_refuses_actions_for_a_predictor_of_states_alone(make_client):
    client = make_client()
    r = client.post("/v1/rollout", json={"states": ["a"], "actions": ["up"], "render": False})
    assert r.status_code == 422 and "states alone" in r.json()["detail"]
    assert "actions" in client.post("/v1/rollout", json={"states": ["a"], "render": False}).json()
