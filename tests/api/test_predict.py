"""POST /v1/predict and /v1/rollout through TestClient, on stand-in stages given to create_app."""

from __future__ import annotations

import base64
import io
import zipfile

import numpy as np
import pytest
from PIL import Image

from tests.api.conftest import REAL_CLIP


def _png(b64: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))))


def post_clip(client, data: bytes, ctype="video/mp4", name="clip.mp4", **form):
    return client.post("/v1/predict", files={"file": (name, data, ctype)}, data=form)


def test_real_camera_clip_gives_states_and_frames(make_client):
    client = make_client()
    r = post_clip(client, REAL_CLIP.read_bytes(), horizon="3", stride="4", seed="1")
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["observed_states"]) == 4 and body["source_indices"] == [0, 4, 8, 12]
    assert body["predicted_states"] == [f"next {i} after {body['observed_states'][-1]}" for i in range(3)]
    assert [_png(f).shape for f in body["frames"]] == [(24, 32, 3)] * 3
    assert _png(body["observed_frames"][0]).shape == (90, 160, 3)
    assert body["state_rate"] == pytest.approx(6.25 / 4) and body["timings"]["total"] > 0


def test_world_clip(make_client, world_clip):
    client = make_client()
    r = post_clip(client, world_clip.read_bytes(), horizon="2", stride="5")
    assert r.status_code == 200, r.text
    assert len(r.json()["observed_states"]) == 12 and len(r.json()["frames"]) == 2


def test_mp4_and_zip_outputs(make_client):
    client = make_client()
    r = post_clip(client, REAL_CLIP.read_bytes(), horizon="2", stride="8", output="mp4")
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4" and r.content[4:8] == b"ftyp"
    r = post_clip(client, REAL_CLIP.read_bytes(), horizon="2", stride="8", output="zip")
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    names = set(zipfile.ZipFile(io.BytesIO(r.content)).namelist())
    assert {"predicted.mp4", "states.json", "strip.png", "observed_001.png", "predicted_001.png"} <= names


@pytest.mark.parametrize(
    ("data", "ctype", "form", "code", "detail"),
    [
        (b"", "video/mp4", {}, 422, "file: the file is empty"),
        (b"\x00garbage" * 200, "video/mp4", {}, 422, "file: not a readable video"),
        (REAL_CLIP.read_bytes()[:1500], "video/mp4", {}, 422, "file: not a readable video"),
        (b"hello", "text/plain", {}, 415, "file: expected a video, got content type 'text/plain'"),
        (REAL_CLIP.read_bytes(), "video/mp4", {"horizon": "0"}, 422, "horizon: Input should be greater than"),
        (
            REAL_CLIP.read_bytes(),
            "video/mp4",
            {"horizon": "99"},
            422,
            "horizon: Input should be less than or equal to 32",
        ),
        (
            REAL_CLIP.read_bytes(),
            "video/mp4",
            {"stride": "0"},
            422,
            "stride: Input should be greater than or equal to 1",
        ),
        (
            REAL_CLIP.read_bytes(),
            "video/mp4",
            {"steps": "0"},
            422,
            "steps: Input should be greater than or equal to 1",
        ),
        (
            REAL_CLIP.read_bytes(),
            "video/mp4",
            {"guidance": "51"},
            422,
            "guidance: Input should be less than or equal to 50",
        ),
        (
            REAL_CLIP.read_bytes(),
            "video/mp4",
            {"horizon": "abc"},
            422,
            "horizon: Input should be a valid integer",
        ),
        (
            REAL_CLIP.read_bytes(),
            "video/mp4",
            {"stride": "2", "state_rate": "1"},
            422,
            "give either stride or",
        ),
        (REAL_CLIP.read_bytes(), "video/mp4", {"output": "gif"}, 422, "output: Input should be"),
        (REAL_CLIP.read_bytes(), "video/mp4", {"stride": "1"}, 200, None),
    ],
)
def test_bad_input_is_a_short_4xx(make_client, data, ctype, form, code, detail):
    client = make_client(max_frames=16)
    r = post_clip(client, data, ctype, horizon=form.pop("horizon", "2"), **form)
    assert r.status_code == code, r.text
    if detail:
        assert r.headers["content-type"] == "application/json"
        assert (
            r.json()["detail"].startswith(detail) and "Traceback" not in r.text
        )  # what it names comes first
        assert "Error" not in r.json()["detail"]  # no exception class


def test_too_many_frames_is_422(make_client):
    client = make_client(max_frames=4)
    r = post_clip(client, REAL_CLIP.read_bytes(), horizon="2")
    assert r.status_code == 422 and r.json()["detail"].startswith(
        "file: clip gives more than 4 states at stride 1"
    )


def test_missing_file_and_json_body(make_client):
    client = make_client()
    r = client.post("/v1/predict", data={"horizon": "2"})
    assert r.status_code == 422 and r.json()["detail"] == "file: Field required"
    r = client.post("/v1/predict", json={"horizon": 2})
    assert r.status_code == 422


def test_oversize_upload_is_413_before_parsing(make_client):
    client = make_client(max_sync_upload_mb=0.01)  # 10 KB; the clip is 27 KB
    r = post_clip(client, REAL_CLIP.read_bytes(), horizon="2")
    assert r.status_code == 413 and "larger than the limit of 0.01 MB" in r.json()["detail"]

    def chunks():  # no Content-Length: counted while streaming
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.mp4"\r\n'
        yield b"Content-Type: video/mp4\r\n\r\n"
        for _ in range(40):
            yield b"x" * 1024

    r = client.post(
        "/v1/predict", content=chunks(), headers={"Content-Type": "multipart/form-data; boundary=b"}
    )
    assert r.status_code == 413


def test_timeout_is_504(make_client):
    from tests.fakes import make_pipeline

    client = make_client(pipeline=make_pipeline(delay=0.5), request_timeout_s=0.3)
    r = post_clip(client, REAL_CLIP.read_bytes(), horizon="4", stride="8")
    assert r.status_code == 504 and "longer than 0.3 s" in r.json()["detail"]


def test_rollout_from_words(make_client):
    client = make_client()
    r = client.post(
        "/v1/rollout",
        json={"states": ["a red ball at the left.", "a red ball."], "horizon": 3, "render_context": 1},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["predicted_states"] == [f"next {i} after a red ball." for i in range(3)]
    assert len(body["frames"]) == 3 and len(body["context_frames"]) == 1
    r = client.post("/v1/rollout", json={"states": ["a."], "horizon": 2, "render": False})
    assert r.status_code == 200 and r.json()["frames"] == []


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"states": [], "horizon": 2}, "states: List should have at least 1 item"),
        ({"states": ["a.", "  "], "horizon": 2}, "states[1] must be a non-empty string"),
        ({"states": ["a."], "horizon": 40}, "horizon: Input should be less than or equal to 32"),
        ({"states": ["a."], "render_context": False}, "render_context: Input should be a valid integer"),
        ({"states": ["a."], "horizon": True}, "horizon: Input should be a valid integer"),
    ],
)
def test_rollout_bad_input(make_client, body, detail):
    r = make_client().post("/v1/rollout", json=body)
    assert r.status_code == 422 and detail in r.json()["detail"]


def test_seed_reproducible_over_http(make_client):
    client = make_client()
    a = client.post("/v1/rollout", json={"states": ["a."], "horizon": 2, "seed": 5}).json()["frames"]
    b = client.post("/v1/rollout", json={"states": ["a."], "horizon": 2, "seed": 5}).json()["frames"]
    c = client.post("/v1/rollout", json={"states": ["a."], "horizon": 2, "seed": 6}).json()["frames"]
    assert a == b and a != c


def test_tiny_real_weights_through_the_lifespan(tmp_path, tiny_weights):
    """No override: the app loads the weights folder itself (from_pretrained), warms up, and answers."""
    from fastapi.testclient import TestClient

    from api.main import create_app
    from api.settings import Settings
    from tests.api.conftest import wait_ready

    app = create_app(
        Settings(data_dir=tmp_path, weights_dir=tiny_weights, samples_dir=tmp_path, device="cpu")
    )
    with TestClient(app) as client:
        wait_ready(client, timeout=120)
        r = post_clip(client, REAL_CLIP.read_bytes(), horizon="2", stride="8")  # out of domain: still valid
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["observed_states"]) == 2 and len(body["predicted_states"]) == 2
        assert [_png(f).shape for f in body["frames"]] == [(32, 32, 3)] * 2


def test_too_many_sync_requests_is_429(make_client):
    import threading

    from pipeline.world_model import WorldModelPipeline
    from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer

    gate = threading.Event()
    renderer = NoiseRenderer(gate=gate)
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), renderer)
    client = make_client(pipeline=pipe, warmup=False, max_sync_waiting=1, retry_after_s=3)
    first: list = []
    held = threading.Thread(target=lambda: first.append(client.post("/v1/rollout", json={"states": ["a."]})))
    held.start()
    for _ in range(1500):  # until the first request holds the model
        if renderer.calls:
            break
        threading.Event().wait(0.02)
    r = client.post("/v1/rollout", json={"states": ["b."]})
    assert (
        r.status_code == 429 and r.headers["retry-after"] == "3" and "too many requests" in r.json()["detail"]
    )
    gate.set()
    held.join(30)
    assert first[0].status_code == 200


def test_rollout_says_what_predict_says_about_its_states(make_client):
    """/v1/rollout carries /v1/predict's confidence fields under the same names, and the semantic timeline."""
    from pipeline.domain import get_domain
    from tests.fakes import make_pipeline

    client = make_client(pipeline=make_pipeline(0.0, world=True))
    given = ["red ball top left , lamp on .", "red ball top midleft , lamp on ."]
    r = client.post("/v1/rollout", json={"states": given, "horizon": 2, "render": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["predicted_states"] == [
        "red ball top center , lamp off .",
        "red ball top midright , lamp on .",
    ]
    assert body["observed_confidence"] == [None, None]  # given in words: nothing was read
    assert body["observed_parses"] == [True, True] and body["predicted_parses"] == [True, True]
    assert (
        body["confidence_threshold"] == get_domain("shapes").confidence_threshold and body["warnings"] == []
    )
    assert body["domain"] == "shapes"
    assert body["changes"] == [
        [],
        ["red ball moved from top left to top midleft"],
        ["red ball moved from top midleft to top center", "lamp switched off"],
        ["red ball moved from top center to top midright", "lamp switched on"],
    ]
    # a forecast outside the grammar is said to be, not hidden
    r = client.post("/v1/rollout", json={"states": ["empty ."], "horizon": 1, "render": False})
    assert r.json()["predicted_states"] == ["empty room ."] and r.json()["predicted_parses"] == [False]
    assert r.json()["changes"] == [[], ["changed (not a world state)"]]
    # weights that name no domain: free text, no verdict either way, no threshold, changes word by word
    plain = make_client(pipeline=make_pipeline(0.0)).post(
        "/v1/rollout", json={"states": ["a."], "render": False}
    )
    assert plain.json()["observed_parses"] == [None] and plain.json()["predicted_parses"] == [None] * 8
    assert plain.json()["domain"] == "text" and plain.json()["confidence_threshold"] is None
    assert plain.json()["changes"][1] == ["added: next 0 after"]  # "a ." -> "next 0 after a ."
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    fields = {"observed_confidence", "observed_parses", "predicted_parses", "confidence_threshold", "warnings",
              "changes"}  # fmt: skip
    assert fields <= set(schemas["RolloutResponse"]["properties"]) & set(
        schemas["PredictResponse"]["properties"]
    )


def test_predict_and_job_results_carry_the_timeline(make_client):
    from pipeline.domain import get_domain, timeline
    from tests.api.conftest import wait_job
    from tests.fakes import make_pipeline, world_step

    client = make_client(pipeline=make_pipeline(0.0, world=True))
    body = post_clip(client, REAL_CLIP.read_bytes(), horizon="2", stride="4").json()
    steps = [*body["observed_states"], *body["predicted_states"]]
    assert body["predicted_states"][0] == world_step(body["observed_states"][-1])
    assert body["changes"] == timeline(get_domain("shapes"), steps) and len(body["changes"]) == 6
    assert "lamp switched off" in body["changes"][4] and body["observed_parses"] == [True] * 4
    r = client.post("/v1/jobs", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
                    data={"horizon": "2", "stride": "4"})  # fmt: skip
    job = wait_job(client, r.json()["id"])
    result = client.get(job["result_url"], params={"format": "json"}).json()
    assert result["changes"] == body["changes"] and result["predicted_parses"] == [True, True]


def _tiny_word_predictor(words: list[str], n: int):
    """A real (random, untrained) 4-tensor predictor with a tokenizer of `words`, reading `n` tokens per state."""
    import torch

    from pipeline.predictor import Predictor
    from pipeline.tokenizer import StateTokenizer
    from tests.fakes import tiny_four_tensor

    torch.manual_seed(0)
    tokenizer = StateTokenizer.build([" ".join(words)])
    return Predictor(tiny_four_tensor(tokenizer, N=n, T=3), tokenizer)


def test_rollout_refuses_words_a_non_world_predictor_does_not_know(make_client):
    """Weights without "grammar": "world": a word outside the tokenizer's vocabulary is a 422 naming it, and a
    state past the predictor's token slots a 422 saying how to fix it, before the predictor runs."""
    from pipeline.utils import UserError
    from pipeline.world_model import WorldModelPipeline
    from tests.fakes import BrightnessCaptioner, NoiseRenderer

    predictor = _tiny_word_predictor(["the", "cat", "sat", "on", "mat", "."], n=6)
    calls: list[int] = []
    real_predict = predictor.predict
    predictor.predict = lambda *a, **k: calls.append(1) or real_predict(*a, **k)  # type: ignore[method-assign]
    renderer = NoiseRenderer()
    pipe = WorldModelPipeline(BrightnessCaptioner(), predictor, renderer)
    client = make_client(pipeline=pipe, warmup=False)

    r = client.post("/v1/rollout", json={"states": ["The cat sat.", "the dog sat ."], "horizon": 1})
    assert r.status_code == 422
    assert r.json()["detail"] == (
        "states[1]: unknown word 'dog' in 'the dog sat .' (not in the predictor's vocabulary)"
    )
    r = client.post("/v1/rollout", json={"states": ["the cat sat on the mat ."], "horizon": 1})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "has 7 words and marks; the predictor reads at most 6 per state: shorten" in detail
    assert "truncate" not in detail
    assert calls == [] and renderer.calls == 0  # refused before any model ran
    r = client.post("/v1/rollout", json={"states": ["The cat sat on the mat"], "horizon": 2, "render": False})
    assert r.status_code == 200, r.text  # case and spacing as the tokenizer reads them
    assert len(r.json()["predicted_states"]) == 2 and r.json()["observed_parses"] == [None]
    assert calls == [1]
    with pytest.raises(UserError, match="unknown word 'dog'"):  # the Python API refuses the same way
        pipe(states=["the dog ."], horizon=1)


def test_the_service_hands_its_projection_and_mirror_settings_to_the_pipeline(tmp_path, monkeypatch):
    """SEMWORLD_PROJECT and SEMWORLD_MIRROR reach WorldModelPipeline.from_pretrained."""
    from fastapi import FastAPI

    from api.main import _load_pipeline
    from api.settings import Settings
    from pipeline.world_model import WorldModelPipeline

    got: dict = {}
    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(lambda w, **kw: got.update(kw)))
    app = FastAPI()
    app.state.stages = None
    monkeypatch.setenv("SEMWORLD_MIRROR", "true")
    monkeypatch.setenv("SEMWORLD_PROJECT", "false")
    _load_pipeline(app, Settings(data_dir=tmp_path, samples_dir=tmp_path))
    assert got["mirror"] is True and got["project"] is False
    _load_pipeline(app, Settings(data_dir=tmp_path, samples_dir=tmp_path, mirror=False))
    assert got["mirror"] is False


def test_stride_and_state_rate_together_is_one_422(make_client):
    client = make_client()
    for route in ("/v1/predict", "/v1/jobs"):
        r = client.post(route, files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
                        data={"stride": "2", "state_rate": "2"})  # fmt: skip
        assert r.status_code == 422 and r.json() == {"detail": "give either stride or state_rate, not both"}
