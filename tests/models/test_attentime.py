"""Tests of models/attentime.py: the causal diode, masked rows, cached decoding, the two Dynamic Value forms, the
1-D LM with the baseline's interface, Attentime inside the 4-tensor model, and the refusals of bad input."""

from __future__ import annotations

import json

import pytest
import torch

from models.attentime import (
    AttentimeAttention,
    AttentimeDecoder,
    AttentimeGridAttention,
    AttentimeLM,
    AttentimeLMConfig,
    GapTime,
    PairTime,
    attention_weights,
    check_attention_name,
    mix_original,
    mix_separable,
    separable_value,
)
from models.four_tensor import FourTensorConfig, FourTensorModel

V, N, T = 23, 5, 3


def attn(seed: int = 0, **kw) -> AttentimeAttention:
    torch.manual_seed(seed)
    return AttentimeAttention(12, 3, **kw).double()


def lm_config(**kw) -> AttentimeLMConfig:
    base = dict(vocab_size=V, d_x=4, d_t=2, n_heads=2, n_layers=2, N=N, T=T, dropout=0.0, padding_idx=0)
    return AttentimeLMConfig(**{**base, **kw})


def ragged_windows(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, V, (4, T + 1, N), generator=g)
    x[0, :, 3:] = 0
    x[1, T, 1:] = 0
    x[2, 1, :] = 0
    return x


# ---------------------------------------------------------------------------------------------------------------
# The rule


def test_scores_are_symmetric_in_query_and_key():
    a = attn()
    qk, _ = a.heads(torch.randn(2, 7, 12, dtype=torch.float64))
    P = qk @ qk.transpose(-1, -2)
    assert torch.equal(P, P.transpose(-1, -2))


@pytest.mark.parametrize("time", ["gap", "pair"])
def test_causal_diode_is_exactly_zero_weight_and_zero_gradient(time):
    a = attn(time=time, vocab_size=30)
    with torch.no_grad():  # large learned Time values must not leak through the diode either
        if time == "gap":
            a.time.rate.fill_(5.0)
        else:
            a.time.table.normal_(0, 50.0)
    x = torch.randn(2, 6, 12, dtype=torch.float64, requires_grad=True)
    times = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 1, 1, 2, 2]])
    ids = torch.randint(0, 30, (2, 6))
    qk, _ = a.heads(x)
    alpha = attention_weights(qk @ qk.transpose(-1, -2), a.time(times, times, ids, ids), None)
    future = times[:, None, None, :] > times[:, None, :, None]  # (B, 1, Lq, Lk)
    assert future.any()
    assert bool((alpha.masked_select(future.expand_as(alpha)) == 0.0).all())
    out, _ = a(x, times, ids=ids)
    out[0, 2].sum().backward()  # query at time 2 of row 0: keys 3..5 are later
    assert bool((x.grad[0, 3:] == 0.0).all()) and bool((x.grad[0, :3] != 0.0).any())


def test_all_padding_row_is_uniform_and_empty_row_is_zero_not_nan():
    a = attn()
    x = torch.randn(2, 4, 12, dtype=torch.float64, requires_grad=True)
    times = torch.arange(4).expand(2, 4)
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1] = True  # row 1: every key is padding
    qk, _ = a.heads(x)
    alpha = attention_weights(qk @ qk.transpose(-1, -2), a.time(times, times), pad)
    assert torch.allclose(
        alpha[1, :, 3], torch.full((3, 4), 0.25, dtype=torch.float64)
    )  # uniform, diode kept
    assert torch.equal(alpha[1, :, 0, 1:], torch.zeros(3, 3, dtype=torch.float64))
    # a query earlier than every key (only possible with a separate key set): all -inf -> zero weights
    alpha = attention_weights(torch.zeros(1, 1, 1, 3), torch.full((1, 1, 1, 3), float("-inf")), None)
    assert torch.equal(alpha, torch.zeros(1, 1, 1, 3))
    out, _ = a(x, times, pad)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


def test_separable_equals_original_at_zero_gate_and_to_first_order():
    g = torch.Generator().manual_seed(3)
    alpha = torch.softmax(torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64), dim=-1)
    qk = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    u = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    zero = torch.zeros_like(u)
    torch.testing.assert_close(
        mix_original(alpha, qk, zero, zero),
        mix_separable(alpha, separable_value(qk, zero), zero),
        rtol=0,
        atol=1e-15,
    )
    # not the same function: the gap shrinks like eps^2 as the gate's scale eps goes to 0
    diffs = [
        float(
            (mix_original(alpha, qk, e * u, e * u) - mix_separable(alpha, separable_value(qk, e * u), e * u))
            .abs()
            .max()
        )
        for e in (1.0, 0.1, 0.01)
    ]
    assert diffs[0] > 1e-2  # measurably different at a unit-scale gate
    assert diffs[1] / diffs[2] > 50  # second order: 10x smaller eps -> ~100x smaller gap


def test_cached_decoding_equals_full_recompute():
    torch.manual_seed(0)
    dec = AttentimeDecoder(V, 12, 3, 2).double().eval()
    ids = torch.randint(1, V, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding in row 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    full = dec(ids, mask, pos).last_hidden_state  # (B, L, d)
    cache, steps = None, []
    for i in range(ids.shape[1]):
        out = dec(ids[:, i : i + 1], mask[:, : i + 1], pos[:, i : i + 1], cache=cache, use_cache=True)
        cache = out.cache
        steps.append(out.last_hidden_state)
    diff = float((torch.cat(steps, dim=1) - full).detach()[mask.bool()].abs().max())
    assert diff < 1e-12, diff


# ---------------------------------------------------------------------------------------------------------------
# The 1-D LM with the baseline's interface


def test_lm_cached_free_run_equals_recompute_and_trains():
    torch.manual_seed(1)
    model = AttentimeLM(lm_config()).double().eval()
    packed = model.pack(ragged_windows())
    cached = model.free_run(packed, n_steps=N + 1, use_cache=True, return_logits=True)
    plain = model.free_run(packed, n_steps=N + 1, use_cache=False, return_logits=True)
    assert torch.equal(cached.tokens, plain.tokens)
    torch.testing.assert_close(cached.logits, plain.logits, rtol=0, atol=1e-10)
    model.train()
    loss = model.training_step(ragged_windows())
    loss.backward()
    assert torch.isfinite(loss) and all(
        torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None
    )
    assert set(model.score(ragged_windows())) >= {"exact_sentences", "selection_loss_sum"}
    ids, _ = model.predict_next(ragged_windows()[:, :T])
    assert ids.shape == (4, N)


def test_lm_overfits_one_window():
    torch.manual_seed(0)
    model = AttentimeLM(lm_config(d_x=8, d_t=4, n_layers=1))
    x = ragged_windows()[:2]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        opt.zero_grad()
        model.training_step(x).backward()
        opt.step()
    model.eval()
    assert model.score(x)["exact_sentences"] == 2


def test_lm_save_load_roundtrip(tmp_path):
    torch.manual_seed(2)
    model = AttentimeLM(lm_config(time="pair")).eval()
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["time"] == "pair"
    again = AttentimeLM.from_pretrained(tmp_path).eval()
    x = ragged_windows()
    assert model.score(x) == again.score(x)


# ---------------------------------------------------------------------------------------------------------------
# Attentime inside the 4-tensor model


def ft_config(**kw) -> FourTensorConfig:
    base = dict(
        vocab_size=V, d_x=4, d_t=2, n_heads=2, n_layers=2, N=N, T=T, dropout=0.0, attention="attentime"
    )
    return FourTensorConfig(**{**base, **kw})


def test_four_tensor_with_attentime_trains_saves_and_predicts(tmp_path):
    torch.manual_seed(0)
    model = FourTensorModel(ft_config())
    assert isinstance(model.layers[0].attention, AttentimeGridAttention)
    x = ragged_windows()
    loss = model.training_step(x)
    loss.backward()
    assert torch.isfinite(loss)
    model.eval()
    ids, _ = model.predict_next(x[:, :T])
    assert torch.equal(ids, model._decode(model(x[:, :T])[:, :, -1]))
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["attention"] == "attentime"
    again = FourTensorModel.from_pretrained(tmp_path)
    assert isinstance(again.layers[0].attention, AttentimeGridAttention)
    assert again.score(x) == model.score(x)


def test_grid_attention_never_reads_a_later_sentence():
    torch.manual_seed(0)
    model = FourTensorModel(ft_config()).double().eval()
    x = ragged_windows()[:, :T]
    y = x.clone()
    y[:, T - 1] = torch.randint(1, V, (4, N))  # change only the last input sentence
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :, : T - 1], b[:, :, : T - 1], rtol=0, atol=0)  # earlier slices untouched
    assert not torch.allclose(a[:, :, T - 1], b[:, :, T - 1])


def test_plain_four_tensor_is_unchanged_by_default():
    cfg = FourTensorConfig(vocab_size=V, d_x=4, d_t=2, n_heads=2, n_layers=1, N=N, T=T)
    assert cfg.attention == "four_tensor"
    assert FourTensorConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != "attention"}) == cfg


# ---------------------------------------------------------------------------------------------------------------
# Bad input


def test_unknown_attention_names_are_refused():
    with pytest.raises(
        ValueError, match="unknown attention 'sto'; known attention kinds: four_tensor, attentime"
    ):
        check_attention_name("sto")
    with pytest.raises(ValueError, match="unknown attention 'qkv'"):
        ft_config(attention="qkv")


def test_pair_time_with_a_mismatched_vocabulary_is_refused():
    pt = PairTime(2, vocab_size=10)
    t = torch.arange(3)[None]
    with pytest.raises(ValueError, match=r"vocabulary 10, but token ids range over \[0, 12\]"):
        pt(t, t, torch.tensor([[0, 12, 3]]), torch.tensor([[0, 12, 3]]))
    with pytest.raises(ValueError, match="needs the token ids"):
        pt(t, t)
    with pytest.raises(ValueError, match="time='pair' needs vocab_size"):
        AttentimeAttention(8, 2, time="pair")


def test_cache_with_the_original_form_is_refused():
    a = attn(dv_form="original")
    with pytest.raises(ValueError, match="the incremental cache needs dv_form='separable'"):
        a(torch.randn(1, 2, 12, dtype=torch.float64), torch.arange(2)[None], use_cache=True)


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="dv_form must be one of original, separable, got 'both'"):
        lm_config(dv_form="both")
    with pytest.raises(ValueError, match="time must be one of gap, pair, got 'rope'"):
        AttentimeAttention(8, 2, time="rope")
    with pytest.raises(ValueError, match="n_heads=3 must divide d_model=8"):
        AttentimeAttention(8, 3)
    assert GapTime(3).rate.shape == (3,)


def test_saved_lm_loads_through_the_predictor_hub(tmp_path):
    from models.hub import load_predictor

    torch.manual_seed(3)
    model = AttentimeLM(lm_config()).eval()
    model.save_pretrained(tmp_path)
    again = load_predictor(tmp_path)
    assert isinstance(again, AttentimeLM)
    x = ragged_windows()
    assert torch.equal(model.predict_next(x[:, :T])[0], again.predict_next(x[:, :T])[0])
