"""One place chooses every stage's device and dtype: defaults per device, one setting for all, per-stage
overrides, one-line errors; WorldModelPipeline.from_pretrained hands each stage its own."""

from __future__ import annotations

import pytest
import torch

from pipeline.placement import parse_dtype, resolve_placement
from pipeline.utils import UserError


def test_defaults_on_the_cpu():
    p = resolve_placement()
    assert all(p[s].device == torch.device("cpu") and p[s].dtype == torch.float32
               for s in ("captioner", "predictor", "renderer"))  # fmt: skip
    assert not p.compile and "predictor cpu float32" in p.describe()


def test_defaults_on_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    p = resolve_placement()
    assert p.predictor.device == torch.device("cuda", 0)
    assert {p[s].dtype for s in ("captioner", "predictor", "renderer")} == {torch.bfloat16}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a T4
    p = resolve_placement()
    assert p.captioner.dtype == p.renderer.dtype == torch.float16 and p.predictor.dtype == torch.float32


def test_one_dtype_for_all_and_per_stage_overrides():
    p = resolve_placement("cpu", "bf16", stage_dtypes=["predictor=float32"], stage_devices={"renderer": "meta"},
                          compile=True)  # fmt: skip
    assert p.captioner.dtype == p.renderer.dtype == torch.bfloat16 and p.predictor.dtype == torch.float32
    assert p.renderer.device == torch.device("meta") and p.captioner.device == torch.device("cpu")
    assert p.compile


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": "float8"}, "--dtype 'float8': expected one of float32"),
        ({"stage_dtypes": ["predictor=int8"]}, "--stage-dtype predictor= 'int8'"),
        ({"stage_devices": ["decoder=cpu"]}, "unknown stage 'decoder'"),
        ({"stage_devices": ["predictor"]}, "expected STAGE=VALUE"),
        ({"stage_devices": ["predictor=cuda"]}, "CUDA is not available"),
    ],
)
def test_bad_options_are_one_line(kwargs, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=message) as err:
        resolve_placement(**kwargs)
    assert "\n" not in str(err.value)


def test_parse_dtype_spellings():
    assert parse_dtype("BF16") is torch.bfloat16 and parse_dtype(torch.float16) is torch.float16
    with pytest.raises(UserError):
        parse_dtype(torch.int64)


def test_every_stage_gets_its_own_device_and_dtype(tiny_weights, monkeypatch):
    """from_pretrained passes each stage the placement's entry (the stage classes record what they got)."""
    import pipeline.captioner
    import pipeline.predictor
    import pipeline.renderer
    from pipeline.world_model import WorldModelPipeline

    got: dict[str, dict] = {}

    def recorder(stage):
        def load(cls, folder, **kw):
            got[stage] = kw
            return object()

        return classmethod(load)

    monkeypatch.setattr(pipeline.captioner.Captioner, "from_pretrained", recorder("captioner"))
    monkeypatch.setattr(pipeline.predictor.Predictor, "from_pretrained", recorder("predictor"))
    monkeypatch.setattr(pipeline.renderer.Renderer, "from_pretrained", recorder("renderer"))
    WorldModelPipeline.from_pretrained(
        tiny_weights,
        device="cpu",
        dtype="bfloat16",
        compile=True,
        stage_devices={"renderer": "meta"},
        stage_dtypes=["predictor=fp32"],
    )
    assert got["captioner"].pop("domain").name == "text"
    assert got["captioner"] == {"device": torch.device("cpu"), "dtype": torch.bfloat16}
    domain = got["predictor"].pop("domain")
    assert domain.name == "text"  # tiny_weights names no domain: free text
    assert got["predictor"] == {
        "device": torch.device("cpu"),
        "dtype": torch.float32,
        "compile": True,
        "project": True,
        "mirror": False,
    }
    assert got["renderer"] == {"device": torch.device("meta"), "dtype": torch.bfloat16}


def test_service_settings_carry_the_placement(monkeypatch):
    from api.settings import Settings

    monkeypatch.setenv("SEMWORLD_STAGE_DTYPES", '{"predictor": "float32"}')
    monkeypatch.setenv("SEMWORLD_COMPILE", "1")
    s = Settings()
    assert s.stage_dtypes == {"predictor": "float32"} and s.compile
    monkeypatch.setenv("SEMWORLD_STAGE_DEVICES", '{"decoder": "cpu"}')
    with pytest.raises(ValueError, match="unknown stage 'decoder'"):
        Settings()


def test_threads_default_to_one_fewer_than_the_usable_cores(monkeypatch):
    """Torch's one thread per core stalls beside any other busy process (bench/threads.py): semworld leaves one
    core free unless told otherwise, in predict, serve and batch alike."""
    import pydantic

    from api.settings import Settings
    from pipeline.placement import default_threads, set_threads, usable_cores

    before = torch.get_num_threads()
    try:
        monkeypatch.setattr("pipeline.placement.usable_cores", lambda: 8)
        assert default_threads() == 7 and set_threads() == 7 and torch.get_num_threads() == 7
        monkeypatch.setattr("pipeline.placement.usable_cores", lambda: 1)
        assert default_threads() == 1
        assert set_threads(3) == 3 and torch.get_num_threads() == 3
        with pytest.raises(UserError, match="--threads must be >= 1"):
            set_threads(0)
    finally:
        torch.set_num_threads(before)
    assert usable_cores() >= 1
    monkeypatch.setenv("SEMWORLD_THREADS", "2")
    assert Settings().threads == 2
    with pytest.raises(pydantic.ValidationError):
        Settings(threads=0)


def test_predict_and_serve_take_threads(monkeypatch, tiny_weights, states_file, tmp_path):
    from pipeline import cli

    seen: list[int | None] = []
    monkeypatch.setattr("pipeline.placement.set_threads", lambda n=None: seen.append(n) or 1)
    argv = [
        "predict",
        "--states",
        str(states_file),
        "--weights",
        str(tiny_weights),
        "--horizon",
        "1",
        "--device",
        "cpu",
    ]
    assert cli.main([*argv, "--out", str(tmp_path / "a"), "--threads", "1"]) == 0
    assert cli.main([*argv, "--out", str(tmp_path / "b")]) == 0
    assert seen == [1, None]
    ns = cli.build_parser().parse_args(["serve", "--threads", "3"])
    assert ns.threads == 3


def test_the_log_names_only_the_stages_that_load():
    from pipeline.placement import resolve_placement

    place = resolve_placement("cpu", None, compile=True)
    assert place.describe(("captioner",)) == "captioner cpu float32"
    assert place.describe().startswith("captioner cpu float32, predictor cpu float32, renderer cpu")
    assert place.describe().endswith("predictor compiled")
