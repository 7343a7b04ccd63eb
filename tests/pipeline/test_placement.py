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
    WorldModelPipeline.from_pretrained(tiny_weights, device="cpu", dtype="bfloat16", compile=True,
                                       stage_devices={"renderer": "meta"}, stage_dtypes=["predictor=fp32"])
    assert got["captioner"].pop("domain").name == "text"
    assert got["captioner"] == {"device": torch.device("cpu"), "dtype": torch.bfloat16}
    domain = got["predictor"].pop("domain")
    assert domain.name == "text"  # tiny_weights names no domain: free text
    assert got["predictor"] == {"device": torch.device("cpu"), "dtype": torch.float32, "compile": True,
                                "project": True, "mirror": False}
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
