"""The tensor memory inside the 4-tensor predictor: config and files, taps, one write per state, streaming."""

from __future__ import annotations

import json
import math

import pytest
import torch

from models.four_tensor import FourTensorConfig, FourTensorModel
from models.presets import four_tensor_config
from models.tensor_memory import MemoryState, TensorMemoryConfig


def _config(memory: bool = True, **mem: object) -> FourTensorConfig:
    knobs = {"d_emb": 32, "mem_channels": 4, "mem_shape": (2, 3, 4), "chunk_size": 8, **mem}
    return four_tensor_config(
        "tiny", vocab_size=20, end_ids=(3,), memory=TensorMemoryConfig(**knobs) if memory else None
    )


def _model(memory: bool = True, seed: int = 0, **mem: object) -> FourTensorModel:
    torch.manual_seed(seed)
    return FourTensorModel(_config(memory, **mem)).eval()


def _history(B: int, L: int, N: int = 8, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 20, (B, L, N), generator=g)
    ids[:, :, 6:] = 0  # padding tails, as real states have
    return ids


def test_config_json_says_whether_memory_is_on_and_round_trips(tmp_path):
    model = _model()
    model.save_pretrained(tmp_path / "m")
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["memory"]["mem_shape"] == [2, 3, 4] and raw["memory"]["chunk_size"] == 8
    loaded = FourTensorModel.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == model.config
    ids = _history(2, 3)
    torch.testing.assert_close(loaded(ids), model(ids))
    _model(memory=False).save_pretrained(tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "config.json").read_text())["memory"] is None
    # A config.json from before the memory (no "memory" key) still loads, without memory.
    assert FourTensorConfig.from_dict({k: v for k, v in raw.items() if k != "memory"}).memory is None


def test_loading_memory_weights_into_a_model_without_memory_is_refused_by_name(tmp_path):
    _model().save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["memory"] = None
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="memory.*built without memory"):
        FourTensorModel.from_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match="without memory"):
        _model(memory=False).load_state_dict(_model().state_dict())
    with pytest.raises(ValueError, match="weights hold none"):
        _model().load_state_dict(_model(memory=False).state_dict())


@pytest.mark.parametrize(
    "mem,name",
    [
        ({"mem_shape": (0, 2, 2)}, "mem_shape"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"sigma_scale": 0.0}, "sigma_scale"),
    ],
)
def test_bad_memory_knobs_are_refused_by_name(mem, name):
    with pytest.raises(ValueError, match=name):
        FourTensorConfig.from_dict({**_config(memory=False).to_dict(), "memory": {"chunk_size": 8, **mem}})


def test_memory_width_must_match_the_fiber():
    with pytest.raises(ValueError, match="memory.d_emb"):
        four_tensor_config("tiny", vocab_size=20, memory=TensorMemoryConfig(d_emb=31))


def test_taps_gates_and_memory_every_n_layers():
    model = _model()
    assert list(model.memory_taps) == [str(i) for i in range(model.config.n_layers)]
    for tap in model.memory_taps.values():
        assert math.isclose(float(torch.sigmoid(tap.gate.detach())), 1 / (1 + math.exp(2)), rel_tol=1e-6)
    torch.manual_seed(0)
    cfg = four_tensor_config(
        "small", vocab_size=20, memory=TensorMemoryConfig(d_emb=128, memory_every_n_layers=2)
    )
    assert list(FourTensorModel(cfg).memory_taps) == ["0"]
    # One interface for the whole stack: a single coord_net and a single conv, whatever the depth.
    assert sum(1 for name, _ in model.named_modules() if name.endswith("coord_net")) == 1


def test_each_state_is_written_once_per_memory_layer_and_streaming_is_o_length():
    model = _model()
    calls = []
    model.memory.register_forward_hook(lambda m, inp, out: calls.append(inp[0].shape))
    L, T = 11, model.config.T
    model.stream_memory(_history(2, L))
    assert len(calls) == (L - T) * len(model.memory_taps)  # one memory step per state that left the window
    assert all(shape == (2, model.config.N, 32) for shape in calls)  # each call: one state's N slots


def test_stream_memory_equals_predict_next_window_by_window():
    model = _model()
    hist = _history(3, 9)
    T = model.config.T
    state = None
    for j in range(9 - T):
        _, state = model.predict_next(hist[:, j : j + T], state)
    streamed = model.stream_memory(hist)
    torch.testing.assert_close(streamed.h, state.h)
    torch.testing.assert_close(streamed.c, state.c)


def test_memory_carries_what_left_the_window():
    """The second window's loss depends on state 0, which is no longer in it: only the memory can carry it."""
    model = _model()
    T = model.config.T
    a = _history(4, T + 2)
    b = a.clone()
    b[:, 0] = _history(4, 1, seed=7)[:, 0]  # only state 0 differs
    with torch.no_grad():
        for tap in model.memory_taps.values():
            tap.gate.fill_(3.0)  # a large memory addend, well above float noise
        model.memory.embedder.content.weight.mul_(30.0)  # a fresh memory writes faint contents
        la = model.window_loss(a[:, 1 : T + 2], model.stream_memory(a[:, : T + 1]))[0]
        lb = model.window_loss(b[:, 1 : T + 2], model.stream_memory(b[:, : T + 1]))[0]
        l0 = model.window_loss(a[:, 1 : T + 2], None)[0]  # the same window with an empty memory
    assert abs(float(la - lb)) > 1e-2 and abs(float(la - l0)) > 1e-2


def test_front_padding_writes_nothing():
    model = _model()
    hist = _history(1, 6)
    padded = torch.cat([torch.zeros(1, 3, 8, dtype=torch.long), hist], dim=1)
    a, b = model.stream_memory(hist), model.stream_memory(padded)
    torch.testing.assert_close(a.h, b.h)
    torch.testing.assert_close(a.c, b.c)


def test_window_loss_gradient_crosses_windows_through_the_state_unless_detached():
    model = _model().train()  # tiny: one layer, so a window's own loss never sees its own write
    T = model.config.T
    hist = _history(2, T + 2)
    state = model.init_memory(2)
    assert isinstance(state, MemoryState) and state.h.shape == (2, 4, 2, 3, 4)
    _, _, s1 = model.window_loss(hist[:, : T + 1], state)
    assert s1.h.requires_grad and not torch.equal(s1.h, state.h)
    for carried, reaches in ((s1, True), (s1.detach(), False)):
        model.zero_grad()
        loss_sum, count, _ = model.window_loss(hist[:, 1 : T + 2], carried)
        (loss_sum / count).backward(retain_graph=True)
        grad = model.memory.write_proj.weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == reaches
    # training_step (a window alone) is window_loss from an empty memory, averaged over the targets.
    model.eval()
    ls, cnt, _ = model.window_loss(hist[:, : T + 1], None)
    torch.testing.assert_close(model.training_step(hist[:, : T + 1]), ls / cnt)


def test_score_memory_counts_and_state():
    model = _model()
    full = _history(3, 4)
    part, state = model.score_memory(full, None)
    assert part["sentences"] == 3 and state.h.shape[0] == 3
    assert model.score(full) == part


def test_memory_read_off_is_the_window_alone_ablation():
    """With the reads dropped, what left the window cannot matter; with them, it does."""
    model = _model()
    with torch.no_grad():
        for tap in model.memory_taps.values():
            tap.gate.fill_(3.0)
        model.memory.embedder.content.weight.mul_(30.0)
    T = model.config.T
    a = _history(2, T + 3)
    b = a.clone()
    b[:, :2] = _history(2, 2, seed=9)  # the first two states differ; both have left the last window
    la = model(a[:, -T:])
    model.memory_read_off = True
    with torch.no_grad():
        off_a = model.memory_hidden_states(a[:, -T:], model.stream_memory(a))[0]
        off_b = model.memory_hidden_states(b[:, -T:], model.stream_memory(b))[0]
        on_empty = model.memory_hidden_states(a[:, -T:], None)[0]
    torch.testing.assert_close(off_a, off_b)
    torch.testing.assert_close(off_a, on_empty)
    model.memory_read_off = False
    with torch.no_grad():
        on_a = model.memory_hidden_states(a[:, -T:], model.stream_memory(a))[0]
        on_b = model.memory_hidden_states(b[:, -T:], model.stream_memory(b))[0]
    assert not torch.allclose(on_a, on_b)
    assert la.shape[-1] == model.config.vocab_size
