"""The predictor on a device: one readout matrix per rollout, no host round trip in the rollout loop (checked on
the 'meta' device, where reading a value back raises), the fixed-shape step equal to the packed one, the compute
dtype under autocast with a float32 softmax, and the torch.compile setting with its fallback."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

import world
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config
from models.tensor_memory import TensorMemoryConfig
from pipeline.predictor import Predictor
from pipeline.tokenizer import StateTokenizer


@pytest.fixture(scope="module")
def clips() -> list[list[str]]:
    return [r["states"] for r in world.sequences("bounce,blink", 4, seed=0, length=10, split="test")]


@pytest.fixture(scope="module")
def tok(clips: list[list[str]]) -> StateTokenizer:
    return StateTokenizer.build(s for c in clips for s in c)


def _model(tok: StateTokenizer, memory: bool = False, **kw: object) -> FourTensorModel:
    torch.manual_seed(0)
    mem = TensorMemoryConfig(d_emb=128, mem_channels=4, mem_shape=(2, 2, 2)) if memory else None
    return FourTensorModel(four_tensor_config("small", vocab_size=tok.vocab_size, end_ids=tok.end_ids,
                                              memory=mem, **kw))  # fmt: skip


def _histories(clips: list[list[str]]) -> list[list[str]]:
    return [clips[0][:6], clips[1][:2], clips[2][:9], clips[3][:1]]  # some shorter than T: front padding


@pytest.mark.parametrize("fixed", [False, True])
def test_readout_matrix_is_materialised_once_per_rollout(tok, clips, fixed, monkeypatch):
    p = Predictor(_model(tok), tok)
    p.fixed_shapes = fixed
    calls = []
    original = p.model.readout_matrix
    monkeypatch.setattr(p.model, "readout_matrix", lambda: calls.append(1) or original())
    p.predict(_histories(clips), k=5)
    assert len(calls) == 1
    p.predict(_histories(clips)[:1], k=3)
    assert len(calls) == 2


@pytest.mark.parametrize("kw", [{}, {"slice_causal": True}, {"memory": True}])
def test_fixed_shape_rollout_equals_the_packed_rollout(tok, clips, kw):
    packed = Predictor(_model(tok, **kw), tok)
    fixed = Predictor(_model(tok, **kw), tok)
    fixed.fixed_shapes = True
    assert not packed.fixed_shapes  # on the CPU, uncompiled: the packed path
    hist = _histories(clips)
    assert fixed.predict(hist, k=4) == packed.predict(hist, k=4)
    window = packed.encode_histories(hist)
    ids, _ = packed.model.predict_next(window)
    step, _ = fixed.model.decode_step(window, fixed.model.readout_matrix())
    assert torch.equal(ids, step)


@pytest.mark.parametrize("memory", [False, True])
def test_rollout_stays_on_the_device(tok, memory):
    """On 'meta' every .item(), .cpu(), .tolist(), nonzero() or bool(tensor) raises: the loop must not read back."""
    with torch.device("meta"):
        model = _model(tok, memory=memory)
    p = Predictor(model, tok, device="meta")
    assert p.fixed_shapes and p.model.W_prime.is_meta
    window = torch.ones(3, p.T, p.N, dtype=torch.long, device="meta")
    state = p.model.init_memory(3, "meta") if memory else None
    ids, _ = p.predict_ids(window, 4, state)
    assert ids.shape == (3, 4, p.N) and ids.is_meta


def test_the_meta_check_catches_a_host_read(tok, monkeypatch):
    """The check above can fail: a step that asks the host for a value breaks the meta rollout."""
    with torch.device("meta"):
        model = _model(tok)
    p = Predictor(model, tok, device="meta")
    step = p.model.decode_step

    def reads_back(window, readout, state=None):
        ids, state = step(window, readout, state)
        int(ids.max())  # a host round trip
        return ids, state

    monkeypatch.setattr(p.model, "decode_step", reads_back)
    with pytest.raises((RuntimeError, NotImplementedError)):
        p.predict_ids(torch.ones(1, p.T, p.N, dtype=torch.long, device="meta"), 2)


def test_compute_dtype_runs_under_autocast_with_a_float32_softmax(tok, clips, monkeypatch):
    model = _model(tok)
    p = Predictor(model, tok, dtype=torch.bfloat16)
    p.fixed_shapes = True
    seen: dict[str, object] = {}
    step, softmax = model.decode_step, F.softmax

    def record(window, readout, state=None):
        seen.update(autocast=torch.is_autocast_enabled("cpu"), dtype=torch.get_autocast_dtype("cpu"),
                    readout=readout.dtype)  # fmt: skip
        return step(window, readout, state)

    def record_softmax(x, *a, **k):
        seen.setdefault("softmax", set()).add(x.dtype)  # type: ignore[union-attr]
        return softmax(x, *a, **k)

    monkeypatch.setattr(model, "decode_step", record)
    monkeypatch.setattr(F, "softmax", record_softmax)
    window = p.encode_histories(_histories(clips))
    low, _ = p.predict_ids(window, 1)
    assert seen["autocast"] and seen["dtype"] == torch.bfloat16 and seen["readout"] == torch.bfloat16
    assert seen["softmax"] == {torch.float32}
    assert model.W_prime.dtype == torch.float32  # the weights stay float32
    # bf16 matmuls change few argmaxes of this untrained model; most slots agree with float32.
    full, _ = Predictor(model, tok).predict_ids(window, 1)
    assert (low == full).float().mean() > 0.8


def test_predictor_rejects_an_unknown_dtype(tok):
    with pytest.raises(ValueError, match="dtype must be"):
        Predictor(_model(tok), tok, dtype=torch.int8)


def test_compile_failure_falls_back_to_eager_with_one_warning(tok, clips, monkeypatch, caplog):
    def broken(*args, **kwargs):
        def fails(*a, **k):
            raise RuntimeError("InductorError: no working C++ compiler found\nmore detail")

        return fails

    monkeypatch.setattr(torch, "compile", broken)
    p = Predictor(_model(tok), tok, compile=True)
    assert p.fixed_shapes
    eager = Predictor(_model(tok), tok)
    with caplog.at_level(logging.WARNING, logger="pipeline.predictor"):
        out = p.predict(_histories(clips), k=3)
        p.predict(_histories(clips), k=2)
    assert out == eager.predict(_histories(clips), k=3)
    warnings = [r.getMessage() for r in caplog.records if "torch.compile failed" in r.getMessage()]
    assert len(warnings) == 1 and "no working C++ compiler" in warnings[0] and "\n" not in warnings[0]


@pytest.mark.slow
def test_compiled_rollout_equals_eager(tok, clips, caplog):
    """Inductor on the CPU (needs a C compiler): the compiled step gives the eager ids (no fallback taken)."""
    p = Predictor(_model(tok), tok, compile=True)
    eager = Predictor(_model(tok), tok)
    with caplog.at_level(logging.WARNING, logger="pipeline.predictor"):
        out = p.predict(_histories(clips), k=3)
    assert not [r for r in caplog.records if "torch.compile failed" in r.getMessage()]
    assert out == eager.predict(_histories(clips), k=3)
