"""The packed fast path of the 4-tensor predictor (only the slots a result can depend on) against the dense
forward: hidden states, training loss and gradients, scores and predicted states, including the padding edge cases
where a query sees no live key (uniform attention over padding) and the slice-causal option."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models.four_tensor import cut_at_end, window_cross_entropy
from tests.models.test_four_tensor import CFG, PAD, make_model, make_window


def edge_window(B: int = 5, seed: int = 4, cfg: dict | None = None) -> torch.Tensor:
    """(B, T+1, N) windows with the padding cases that matter: a row all padding, a row whose first sentences are
    all padding, a row with one live token, a padding last slice under live targets, and ordinary rows."""
    c = {**CFG, **(cfg or {})}
    full = make_window(B, seed=seed, cfg=cfg)
    full[0] = PAD  # every key of every query is padding -> uniform attention
    full[1, :2] = PAD  # sentences 0-1 empty: under slice_causal their queries see only padding keys
    full[2] = PAD
    full[2, 1, 0] = 3  # a single live token
    full[3, c["T"] - 1, 2:] = PAD  # last input sentence shorter than the target sentence below it
    full[3, c["T"], :] = 5
    return full


@pytest.mark.parametrize(
    "overrides", [{}, {"slice_causal": True}, {"n_layers": 1}, {"n_layers": 3, "n_heads": 1}]
)
def test_packed_hidden_states_equal_dense_ones(overrides):
    model = make_model(**overrides)
    ids = edge_window()[:, :-1]
    dense = model.hidden_states(ids)  # (B, N, T, d_x, d_t)
    g = torch.Generator().manual_seed(0)
    for wanted in (
        torch.ones(dense.shape[:3], dtype=torch.bool),
        torch.rand(dense.shape[:3], generator=g) < 0.3,
        (ids != PAD).permute(0, 2, 1),
    ):
        torch.testing.assert_close(model.packed_hidden_states(ids, wanted), dense[wanted])


@pytest.mark.parametrize("causal", [False, True])
def test_training_step_loss_and_gradients_equal_dense_window_loss(causal):
    model = make_model(slice_causal=causal)
    full = edge_window()
    loss = model.training_step(full)
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    dense = window_cross_entropy(model(full[:, :-1]), full[:, 1:], PAD)
    dense_grads = torch.autograd.grad(dense, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(loss, dense)
    for (name, _), a, b in zip(model.named_parameters(), grads, dense_grads, strict=True):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("causal", [False, True])
def test_predict_next_and_score_equal_dense_logits(causal):
    model = make_model(slice_causal=causal, end_ids=(5,))
    full = edge_window()
    ids = full[:, :-1]
    logits = model(ids)  # (B, N, T, V)
    pred, _ = model.predict_next(ids)
    last = logits[:, :, -1].clone()
    last[..., PAD] = -torch.inf
    assert torch.equal(pred, cut_at_end(last.argmax(-1), (5,), PAD))
    pred[0, 0] = 7  # an ordinary tensor: the caller may edit it in place
    s = model.score(full)
    assert s["selection_loss_sum"] == pytest.approx(
        window_cross_entropy(logits, full[:, 1:], PAD, reduction="sum").item()
    )
    gold = full[:, -1]
    live = gold != PAD
    assert s["last_ce_sum"] == pytest.approx(
        F.cross_entropy(logits[:, :, -1][live], gold[live], reduction="sum").item()
    )
    assert s["last_correct"] == ((logits[:, :, -1].argmax(-1) == gold) & live).sum().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_all_padding_window_is_uniform_and_finite_in_low_precision(dtype):
    model = make_model(dtype=dtype)
    c = model.config
    ids = torch.zeros(2, c.T, c.N, dtype=torch.long)
    ids[1, 0, 0] = 4
    wanted = torch.ones(2, c.N, c.T, dtype=torch.bool)
    dense = model.hidden_states(ids)[wanted].float()
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == torch.bfloat16 else {}
    for grad in (True, False):  # explicit softmax with autograd, the fused kernel without
        with torch.set_grad_enabled(grad):
            packed = model.packed_hidden_states(ids, wanted)
        assert torch.isfinite(packed).all()
        torch.testing.assert_close(packed.float(), dense, **tol)


def test_training_step_materialises_M_before_the_product():
    from tests.models.test_four_tensor import OpLog

    model = make_model()
    c = model.config
    full = edge_window()
    with OpLog() as log:
        model.training_step(full)
    shapes = [tuple(out.shape) for _, _, out in log.calls if isinstance(out, torch.Tensor)]
    assert (c.d, c.vocab_size) in shapes  # M itself
    n = int((full[:, 1:] != PAD).sum())  # slots with a live target, the rows of the logits
    assert (n, c.vocab_size) in shapes
    assert not [s for s in shapes if math.prod(s) == n * c.d_t * c.vocab_size]  # no (n, d_t, V) product


def test_dropout_acts_on_both_residual_branches_of_the_packed_training_path():
    """The packed path (training_step) applies the config's dropout, twice per layer, only in train mode: deleting
    it from the packed path makes the train-mode loss equal the eval-mode one and the call counts drop."""
    model = make_model(dropout=0.5)
    full = make_window(B=4, seed=7)
    calls: list[str] = []
    for i, layer in enumerate(model.layers):
        layer.dropout.register_forward_hook(lambda m, a, o, i=i: calls.append(f"layer{i}"))
    model.train()
    torch.manual_seed(0)
    loss_a = model.training_step(full)
    assert calls == [f"layer{i}" for i in range(model.config.n_layers) for _ in range(2)]
    torch.manual_seed(0)
    assert torch.equal(
        model.training_step(full), loss_a
    )  # the masks come from torch's RNG: seeded, repeatable
    torch.manual_seed(1)
    assert not torch.equal(model.training_step(full), loss_a)  # and they are random
    model.eval()
    eval_loss = model.training_step(full)
    assert not torch.isclose(loss_a, eval_loss)
    prefix, targets = model.split_window(full)
    assert torch.allclose(
        eval_loss, window_cross_entropy(model(prefix), targets, PAD)
    )  # eval: no dropout at all
