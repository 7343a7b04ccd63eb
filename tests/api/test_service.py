"""Health, readiness, metrics, the API key, the OpenAPI schema, samples and the page, over TestClient."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.settings import Settings
from tests.api.conftest import REAL_CLIP


def test_health_ready_and_warmup(make_client):
    client = make_client()
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready").json()
    assert ready["ready"] is True and ready["warmup_seconds"] >= 0


def test_failed_model_load_keeps_health_and_says_why(tmp_path):
    app = create_app(Settings(data_dir=tmp_path, weights_dir=tmp_path / "missing"))
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        for _ in range(200):
            r = client.get("/ready")
            if r.json()["detail"] != "loading models":
                break
        assert r.status_code == 503
        assert (
            r.json()["detail"]
            == f"failed to load models: weights {tmp_path / 'missing'}: no such directory; expected a weights "
            "folder whose model_index.json names its captioner, predictor, renderer folders"
        )
        r = client.post("/v1/rollout", json={"states": ["a."]})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"


def test_metrics_has_requests_stages_and_jobs(make_client):
    client = make_client()
    client.post("/v1/rollout", json={"states": ["a."], "horizon": 2})
    text = client.get("/metrics").text
    assert 'http_request_duration_seconds_count{handler="/v1/rollout"' in text
    assert 'semworld_stage_seconds_count{stage="render"} 1.0' in text
    assert 'semworld_predictions_total{entry="rollout",outcome="ok"} 1.0' in text
    assert "semworld_queue_depth 0.0" in text and 'semworld_jobs{state="succeeded"} 0.0' in text


@pytest.mark.parametrize("header", [{"X-API-Key": "s3cret"}, {"Authorization": "Bearer s3cret"}])
def test_api_key_guards_all_but_health_and_page(make_client, header):
    client = make_client(api_key="s3cret")
    for path in ("/health", "/ready", "/", "/static/app.js"):
        assert client.get(path).status_code == 200, path
    assert client.get("/metrics").status_code == 401
    r = client.post("/v1/rollout", json={"states": ["a."]}, headers={"X-API-Key": "wrong"})
    assert r.status_code == 401 and r.json() == {"detail": "missing or wrong API key"}
    assert client.get("/v1/jobs/x").status_code == 401
    assert (
        client.post("/v1/rollout", json={"states": ["a."], "horizon": 1}, headers=header).status_code == 200
    )
    assert client.get("/metrics", headers=header).status_code == 200


def test_settings_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SEMWORLD_API_KEY", "")
    monkeypatch.setenv("SEMWORLD_MAX_QUEUE", "3")
    monkeypatch.setenv("SEMWORLD_DATA_DIR", str(tmp_path))
    s = Settings()
    assert s.api_key is None and s.max_queue == 3 and s.data_dir == tmp_path
    monkeypatch.setenv("SEMWORLD_DTYPE", "float8")
    with pytest.raises(ValueError, match="dtype must be float32, float16 or bfloat16"):
        Settings()


def test_openapi_is_complete_with_examples(make_client):
    spec = make_client().get("/openapi.json").json()
    paths = spec["paths"]
    for path, method in [
        ("/v1/predict", "post"),
        ("/v1/jobs", "post"),
        ("/v1/jobs/{job_id}", "get"),
        ("/v1/jobs/{job_id}", "delete"),
        ("/v1/jobs/{job_id}/result", "get"),
        ("/v1/rollout", "post"),
        ("/health", "get"),
        ("/ready", "get"),
        ("/metrics", "get"),
        ("/v1/samples", "get"),
    ]:
        assert method in paths[path], (path, method)
    predict = paths["/v1/predict"]["post"]
    assert {"200", "413", "415", "422", "429", "504"} <= set(predict["responses"])
    assert {"video/mp4", "application/zip", "application/json"} <= set(predict["responses"]["200"]["content"])
    schemas = spec["components"]["schemas"]
    assert schemas["RolloutRequest"]["examples"][0]["horizon"] == 2
    assert "examples" in schemas["PredictResponse"]["properties"]["observed_states"]
    form = next(v for k, v in schemas.items() if k.startswith("Body_predict"))
    assert {"file", "horizon", "stride", "state_rate", "seed", "steps", "guidance", "output"} <= set(
        form["properties"]
    )


def test_samples_and_page(make_client):
    client = make_client()
    samples = client.get("/v1/samples").json()
    assert {
        "name": REAL_CLIP.name,
        "url": f"/v1/samples/{REAL_CLIP.name}",
        "size": REAL_CLIP.stat().st_size,
    } in samples
    assert client.get(f"/v1/samples/{REAL_CLIP.name}").content == REAL_CLIP.read_bytes()
    assert client.get("/v1/samples/..%2Fconftest.py").status_code == 404
    page = client.get("/")
    assert page.status_code == 200 and 'id="predict-form"' in page.text and "/static/app.js" in page.text
    assert "/v1/rollout" in client.get("/static/app.js").text


def test_world_samples_are_made_when_no_folder_is_set(tmp_path):
    from tests.api.conftest import wait_ready
    from tests.fakes import make_pipeline

    app = create_app(Settings(data_dir=tmp_path / "shapes"), stages=make_pipeline(0.0, world=True))
    with TestClient(app) as client:
        wait_ready(client)
        names = [s["name"] for s in client.get("/v1/samples").json()]
    assert names == ["world-bounce.mp4", "world-collide.mp4", "world-gravity.mp4"]
    # stages of the free-text domain: it has no clips of its own, so the page offers none
    app = create_app(Settings(data_dir=tmp_path / "text"), stages=make_pipeline(0.0))
    with TestClient(app) as client:
        wait_ready(client)
        assert client.get("/v1/samples").json() == []
