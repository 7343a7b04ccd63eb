"""The 4-tensor predictor: the twelve faithfulness checks of section 4.8, one named test each, plus gradcheck,
padding, files and the shape contract. Each check is compared with an independent rank-4 reference written here."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from models.four_tensor import (
    FourTensorConfig,
    FourTensorModel,
    build_pad_mask,
    count_parameters,
    cut_at_end,
    one_hot_targets,
    vocab_probabilities,
    window_cross_entropy,
)
from models.four_tensor_input import fiber_norm
from models.hub import load_predictor

# d_x != d_t, T != d_x and N != T, so a swapped fiber, a swapped layout or a missing permute changes the numbers.
CFG = dict(vocab_size=37, d_x=4, d_t=2, n_heads=2, n_layers=2, N=5, T=3, dropout=0.0)
PAD = 0


def make_model(seed: int = 0, dtype: torch.dtype = torch.float64, **overrides) -> FourTensorModel:
    torch.manual_seed(seed)
    model = FourTensorModel(FourTensorConfig(**{**CFG, **overrides})).to(dtype)
    # Non-trivial LayerNorm affines and biases, so a LayerNorm at the wrong place or on swapped fibers shows.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model.eval()


def make_window(B: int = 2, seed: int = 1, cfg: dict | None = None) -> torch.Tensor:
    """(B, T+1, N) ids with trailing padding in most sentences."""
    c = {**CFG, **(cfg or {})}
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, c["vocab_size"], (B, c["T"] + 1, c["N"]), generator=g)
    lengths = torch.randint(2, c["N"] + 1, (B, c["T"] + 1), generator=g)
    slot = torch.arange(c["N"])
    return ids.masked_fill(slot[None, None, :] >= lengths[..., None], PAD)


class OpLog(TorchDispatchMode):
    """Records every aten call with its arguments and output."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, out))
        return out

    def names(self) -> list[str]:
        return [str(f) for f, _, _ in self.calls]


# ---------------------------------------------------------------------------------------------------------------
# An independent reference forward on the rank-4 layout (explicit (n, q) indices, no flattening)


def ref_pe(pos: torch.Tensor, dim: int) -> torch.Tensor:
    out = torch.zeros(*pos.shape, dim, dtype=torch.float64)
    for i in range(dim // 2):
        out[..., 2 * i] = torch.sin(pos / 10000 ** (2 * i / dim))
        out[..., 2 * i + 1] = torch.cos(pos / 10000 ** (2 * i / dim))
    return out


def ref_ln(ln: nn.LayerNorm, X: torch.Tensor) -> torch.Tensor:
    """LayerNorm over the (n, q) fiber, affine indexed as [n, q] = flat n * d_t + q."""
    d_x, d_t = X.shape[-2:]
    mu = X.mean(dim=(-2, -1), keepdim=True)
    var = X.var(dim=(-2, -1), unbiased=False, keepdim=True)
    return (X - mu) / torch.sqrt(var + ln.eps) * ln.weight.view(d_x, d_t) + ln.bias.view(d_x, d_t)


def ref_input(model: FourTensorModel, ids: torch.Tensor) -> torch.Tensor:
    c = model.config
    E_sem, E_temp = model.input_construction.E_sem.weight, model.input_construction.E_temp.weight
    x = torch.arange(c.N, dtype=torch.float64)
    t = torch.arange(c.T, dtype=torch.float64)
    P = ref_pe(x, c.d_x)  # (N, d_x)
    Temb = ref_pe(x[:, None] + t[None, :], c.d_t)  # (N, T, d_t)
    S = torch.einsum("btxn,btxq->bxtnq", E_sem[ids], E_temp[ids])
    return S + P[None, :, None, :, None] + Temb[None, :, :, None, :]


def ref_attention(attn, X: torch.Tensor, pad: torch.Tensor, heads=None) -> torch.Tensor:
    B, N, T, d_x, d_t = X.shape
    out = torch.zeros_like(X)
    for h in heads if heads is not None else range(attn.n_heads):
        Q = torch.einsum("mpnq,bxtnq->bxtmp", attn.W_Q[h], X)
        K = torch.einsum("mpnq,bxtnq->bxtmp", attn.W_K[h], X)
        V = torch.einsum("mpnq,bxtnq->bxtmp", attn.W_V[h], X)
        E = torch.einsum("bxtmp,byump->bxtyu", Q, K) / math.sqrt(d_x * d_t)
        E = E.masked_fill(pad[:, None, None, :, :], torch.finfo(E.dtype).min)
        A = E.reshape(B, N, T, N * T).softmax(-1).view(B, N, T, N, T)
        out = out + torch.einsum("bxtyu,byump->bxtmp", A, V)
    return out


def ref_mlp(layer, X: torch.Tensor) -> torch.Tensor:
    d_x, d_t = X.shape[-2:]
    h = ref_ln(layer.ln_mlp, X)
    W1 = layer.fc1.weight.view(-1, d_x, d_t)  # (f, n, q)
    W2 = layer.fc2.weight.view(d_x, d_t, -1)  # (m, p, f)
    u = F.gelu(torch.einsum("fnq,bxtnq->bxtf", W1, h) + layer.fc1.bias)
    return torch.einsum("mpf,bxtf->bxtmp", W2, u) + layer.fc2.bias.view(d_x, d_t)


def ref_layer(layer, X: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    X = X + ref_attention(layer.attention, ref_ln(layer.ln_attn, X), pad)
    return X + ref_mlp(layer, X)


def ref_logits(model: FourTensorModel, ids: torch.Tensor) -> torch.Tensor:
    pad = (ids == PAD).permute(0, 2, 1)
    X = ref_input(model, ids)
    for layer in model.layers:
        X = ref_layer(layer, X, pad)
    Xn = ref_ln(model.final_norm, X)
    return torch.einsum("bxtnq,vn,qv->bxtv", Xn, model.input_construction.E_sem.weight, model.W_prime)


def test_full_forward_matches_rank4_reference():
    model = make_model()
    ids = make_window()[:, :-1]
    torch.testing.assert_close(model(ids), ref_logits(model, ids))


# ---------------------------------------------------------------------------------------------------------------
# Section 4.8, checks 1-12


def test_check01_activation_layout_is_B_N_T_dx_dt():
    model = make_model()
    c = model.config
    ids = make_window()[:, :-1]  # (B, T, N)
    X = model.input_construction(ids)
    assert X.shape == (2, c.N, c.T, c.d_x, c.d_t)
    E_sem, E_temp = model.input_construction.E_sem.weight, model.input_construction.E_temp.weight
    P, Temb = model.input_construction.P, model.input_construction.Temb
    for b in range(2):
        for x in range(c.N):
            for t in range(c.T):
                v = ids[b, t, x]
                expected = torch.outer(E_sem[v], E_temp[v]) + P[x][:, None] + Temb[x, t][None, :]
                torch.testing.assert_close(X[b, x, t], expected)
    assert model.hidden_states(ids).shape == (2, c.N, c.T, c.d_x, c.d_t)


def test_check02_one_fiber_index_phi_everywhere():
    model = make_model()
    c = model.config
    layer = model.layers[0]
    X = torch.randn(2, c.N, c.T, c.d_x, c.d_t, dtype=torch.float64)
    # Weight view: the flat contraction equals the rank-4 one with W[h, m, p, n, q].
    Q = layer.attention._contract(X.reshape(2, c.N * c.T, c.d), layer.attention.W_Q)  # (B, H, NT, d)
    for h in range(c.n_heads):
        ref = torch.einsum("mpnq,bxtnq->bxtmp", layer.attention.W_Q[h], X).reshape(2, c.N * c.T, c.d)
        torch.testing.assert_close(Q[:, h], ref)
    # LayerNorm affine and MLP weights read the fiber at n * d_t + q.
    torch.testing.assert_close(fiber_norm(layer.ln_attn, X), ref_ln(layer.ln_attn, X))
    torch.testing.assert_close(fiber_norm(model.final_norm, X), ref_ln(model.final_norm, X))
    torch.testing.assert_close(layer.mlp(X), ref_mlp(layer, X))
    # Readout matrix rows.
    M = model.readout_matrix()
    E_sem, W_prime = model.input_construction.E_sem.weight, model.W_prime
    for n in range(c.d_x):
        for q in range(c.d_t):
            torch.testing.assert_close(M[n * c.d_t + q, 1:], E_sem[1:, n] * W_prime[q, 1:])


def test_check03_P_over_t_and_q_Temb_over_n():
    model = make_model()
    c = model.config
    ic = model.input_construction
    x = torch.arange(c.N, dtype=torch.float64)
    t = torch.arange(c.T, dtype=torch.float64)
    assert ic.P.shape == (c.N, c.d_x) and ic.Temb.shape == (c.N, c.T, c.d_t)
    torch.testing.assert_close(ic.P, ref_pe(x, c.d_x))  # phase x
    torch.testing.assert_close(ic.Temb, ref_pe(x[:, None] + t[None, :], c.d_t))  # joint phase x + t
    # An all-padding window has S = 0: X[x, t, n, q] = P[x, n] + Temb[x, t, q] on the whole (n, q) grid.
    X = ic(torch.zeros(1, c.T, c.N, dtype=torch.long))[0]
    expected = ic.P[:, None, :, None] + ic.Temb[:, :, None, :]
    torch.testing.assert_close(X, expected)
    # Column independence and the shared phase T[x, t] = T[x-1, t+1].
    assert not torch.allclose(ic.Temb[0, 1], ic.Temb[1, 1])
    torch.testing.assert_close(ic.Temb[2, 0], ic.Temb[1, 1])


def test_check04_pad_mask_from_token_ids_not_from_norm():
    model = make_model()
    c = model.config
    ids = make_window()[:, :-1]
    pad = build_pad_mask(ids, PAD)
    assert pad.shape == (2, c.N, c.T)
    torch.testing.assert_close(pad, (ids == PAD).permute(0, 2, 1))
    X = model.input_construction(ids)
    assert pad.any() and (X.flatten(-2).norm(dim=-1)[pad] > 0.1).all()  # padding slots are not zero vectors
    A, _ = model.layers[0].attention.probabilities(X, pad)  # (B, H, NT, NT)
    key_is_pad = pad.reshape(2, 1, 1, c.N * c.T).expand_as(A)
    assert (A[key_is_pad] == 0).all()
    assert (A[~key_is_pad] > 0).all()
    # Inside the model, every attention receives exactly that id-derived mask.
    seen = []
    for layer in model.layers:
        layer.attention.register_forward_pre_hook(lambda mod, args: seen.append(args[1]))
    model(ids)
    assert len(seen) == c.n_layers and all(torch.equal(m, pad) for m in seen)


def test_check05_key_fill_is_finite_min_queries_and_mlp_unmasked():
    model = make_model()
    c = model.config
    ids = make_window()[:, :-1]
    with OpLog() as log:
        model(ids)
    fills = [args for f, args, _ in log.calls if "masked_fill" in str(f)]
    assert len(fills) == c.n_layers  # one key fill per layer; nothing else masked
    for args in fills:
        assert args[2] == torch.finfo(torch.float64).min
        assert args[1].shape == (2, 1, 1, c.N * c.T)  # key axis only
    # Padding queries keep a full distribution over the live keys.
    X = model.input_construction(ids)
    pad = build_pad_mask(ids, PAD)
    A, _ = model.layers[0].attention.probabilities(X, pad)
    query_is_pad = pad.reshape(2, c.N * c.T)
    torch.testing.assert_close(A.sum(-1), torch.ones_like(A.sum(-1)))
    assert (A.transpose(1, 2)[query_is_pad].amax(-1) > 0).all()
    assert list(inspect.signature(model.layers[0].mlp).parameters) == ["X"]


def test_check06_pad_mask_local_to_call_and_shared_by_layers():
    model = make_model()
    seen: list[torch.Tensor] = []
    for layer in model.layers:
        layer.register_forward_pre_hook(lambda mod, args: seen.append(args[1]))
    a, b = make_window(seed=1)[:, :-1], make_window(seed=2)[:, :-1]
    model(a)
    out_b = model(b)
    assert len(seen) == 2 * len(model.layers)
    assert all(m is seen[0] for m in seen[:2]) and all(m is seen[2] for m in seen[2:])
    torch.testing.assert_close(seen[2], build_pad_mask(b, PAD))
    torch.testing.assert_close(out_b, make_model()(b))  # nothing of the first call carried over


def test_check07_full_fiber_heads_summed_without_sqrt_H():
    model = make_model()
    c = model.config
    attn = model.layers[0].attention
    assert attn.W_Q.shape == (c.n_heads, c.d_x, c.d_t, c.d_x, c.d_t)
    X = torch.randn(2, c.N, c.T, c.d_x, c.d_t, dtype=torch.float64)
    pad = build_pad_mask(make_window()[:, :-1], PAD)
    total = attn(X, pad)
    torch.testing.assert_close(total, ref_attention(attn, X, pad))
    parts = [ref_attention(attn, X, pad, heads=[h]) for h in range(c.n_heads)]
    torch.testing.assert_close(total, sum(parts))
    # A second head with zero values adds nothing: the output is exactly the one-head output.
    with torch.no_grad():
        attn.W_V[1:].zero_()
    torch.testing.assert_close(attn(X, pad), parts[0])


def test_check08_pre_ln_on_branches_and_final_norm():
    model = make_model()
    c = model.config
    layer = model.layers[0]
    X = 3.0 * torch.randn(2, c.N, c.T, c.d_x, c.d_t, dtype=torch.float64) + 1.0
    pad = build_pad_mask(make_window()[:, :-1], PAD)
    torch.testing.assert_close(layer(X, pad), ref_layer(layer, X, pad))
    ids = make_window()[:, :-1]
    X_last = model.input_construction(ids)
    for lay in model.layers:
        X_last = lay(X_last, build_pad_mask(ids, PAD))
    expected = torch.einsum(
        "bxtnq,vn,qv->bxtv",
        ref_ln(model.final_norm, X_last),
        model.input_construction.E_sem.weight,
        model.W_prime,
    )
    torch.testing.assert_close(model(ids), expected)


def test_check09_single_dropout_rate_on_both_branches_only():
    model = make_model(dropout=0.25)
    drops = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Dropout)]
    assert sorted(name for name, _ in drops) == [f"layers.{i}.dropout" for i in range(model.config.n_layers)]
    assert all(m.p == 0.25 for _, m in drops)
    ids = make_window()[:, :-1]
    model.train()
    with OpLog() as log:
        model(ids)
    # Each dropout draws one random mask (aten.bernoulli_ on CPU, native_dropout where it is fused).
    assert sum("bernoulli" in n or "native_dropout" in n for n in log.names()) == 2 * model.config.n_layers
    # Dropping everything leaves the identity path: the layers pass X through unchanged.
    for _, m in drops:
        m.p = 1.0
    X = model.input_construction(ids)
    pad = build_pad_mask(ids, PAD)
    for layer in model.layers:
        torch.testing.assert_close(layer(X, pad), X)


def test_check10_readout_matrix_materialised_before_product():
    model = make_model()
    c = model.config
    B = 2
    ids = make_window(B)[:, :-1]
    with OpLog() as log:
        logits = model(ids)
    shapes = [tuple(out.shape) for _, _, out in log.calls if isinstance(out, torch.Tensor)]
    assert (c.d, c.vocab_size) in shapes  # M itself
    too_big = B * c.N * c.T * c.d_t * c.vocab_size  # the (BNT, d_t, V) intermediate of the other order
    assert not [s for s in shapes if math.prod(s) == too_big]
    M = model.readout_matrix()
    torch.testing.assert_close(logits, (model.hidden_states(ids).reshape(-1, c.d) @ M).view_as(logits))


def test_check11_loss_permutes_targets_and_ignores_padding():
    model = make_model()
    c = model.config
    full = make_window()
    logits = model(full[:, :-1])
    Y = full[:, 1:]
    total, count = 0.0, 0
    for b in range(2):
        for t in range(c.T):
            for x in range(c.N):
                if Y[b, t, x] != PAD:
                    total -= torch.log_softmax(logits[b, x, t], -1)[Y[b, t, x]]
                    count += 1
    torch.testing.assert_close(model.training_step(full), total / count)
    torch.testing.assert_close(window_cross_entropy(logits, Y, PAD), total / count)
    # Logits at padding targets do not enter the loss.
    where = (Y == PAD).permute(0, 2, 1)
    assert where.any()
    shifted = logits.clone()
    shifted[where] += torch.randn_like(shifted[where])
    torch.testing.assert_close(window_cross_entropy(shifted, Y, PAD), total / count)


def test_check12_training_compares_logits_to_integer_targets():
    model = make_model()
    c = model.config
    full = make_window()
    with OpLog() as log:
        model.training_step(full).backward()
    names = log.names()
    assert not any("one_hot" in n for n in names)
    vocab_softmax = [
        out
        for f, _, out in log.calls
        if str(f).startswith("aten._softmax.") and out.shape[-1] == c.vocab_size
    ]
    assert not vocab_softmax
    nll = [args for f, args, _ in log.calls if str(f).startswith(("aten.nll_loss.", "aten.nll_loss_forward"))]
    assert nll and all(not args[1].is_floating_point() for args in nll)
    # The diagnostics exist apart from training.
    p = vocab_probabilities(model(full[:, :-1]))
    torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1], dtype=p.dtype))
    assert one_hot_targets(full[:, 1:], c.vocab_size).shape == (2, c.N, c.T, c.vocab_size)


# ---------------------------------------------------------------------------------------------------------------
# Gradients, padding, initialisation


def test_gradcheck_float64_tiny():
    model = make_model(vocab_size=7, d_x=2, d_t=2, n_heads=2, n_layers=1, N=3, T=2)
    full = make_window(cfg=dict(vocab_size=7, d_x=2, d_t=2, N=3, T=2))
    assert (full == PAD).any()
    names = [n for n, _ in model.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in model.parameters())

    def loss(*ps):
        logits = torch.func.functional_call(model, dict(zip(names, ps)), (full[:, :-1],))
        return window_cross_entropy(logits, full[:, 1:], PAD)

    assert torch.autograd.gradcheck(loss, params, eps=1e-6, atol=1e-5, fast_mode=True)


def test_padding_rows_stay_zero_and_get_no_gradient():
    model = make_model(dtype=torch.float32, dropout=0.1).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    full = make_window()
    for _ in range(3):
        opt.zero_grad()
        model.training_step(full).backward()
        for table in (model.input_construction.E_sem, model.input_construction.E_temp):
            assert (table.weight.grad[PAD] == 0).all()
        opt.step()
    for table in (model.input_construction.E_sem, model.input_construction.E_temp):
        assert (table.weight[PAD] == 0).all()
    # E_sem also learns through the tied readout: an id absent from the window still gets a gradient there.
    absent = sorted(set(range(1, CFG["vocab_size"])) - set(full.unique().tolist()))[0]
    assert model.input_construction.E_sem.weight.grad[absent].abs().sum() > 0
    assert model.input_construction.E_temp.weight.grad[absent].abs().sum() == 0
    assert model.W_prime.grad.abs().sum() > 0


def test_fully_padded_key_row_gives_finite_uniform_distribution():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        model = make_model(dtype=dtype)
        c = model.config
        ids = torch.zeros(1, c.T, c.N, dtype=torch.long)
        X = model.input_construction(ids)
        A, _ = model.layers[0].attention.probabilities(X, build_pad_mask(ids, PAD))
        assert torch.isfinite(A).all()
        tol = 1e-3 if dtype == torch.bfloat16 else 1e-6
        torch.testing.assert_close(A.float(), torch.full(A.shape, 1.0 / (c.N * c.T)), atol=tol, rtol=0)
        assert torch.isfinite(model(ids)).all()


def test_qkv_xavier_on_flat_matrix():
    torch.manual_seed(0)
    cfg = FourTensorConfig(vocab_size=11, d_x=16, d_t=4, n_heads=2, n_layers=1, N=2, T=2)
    W = FourTensorModel(cfg).layers[0].attention.W_Q  # (H, m, p, n, q)
    bound = math.sqrt(6.0 / (2 * cfg.d))  # fan_in = fan_out = d_x * d_t
    for h in range(cfg.n_heads):
        flat = W[h].reshape(cfg.d, cfg.d)
        assert flat.abs().max() <= bound
        assert flat.abs().max() > 0.95 * bound
        assert abs(flat.std().item() - bound / math.sqrt(3)) < 0.05 * bound


# ---------------------------------------------------------------------------------------------------------------
# Shape contract, files, slice-causal option, decoding and scoring


def test_wrong_window_shapes_raise_value_error_naming_the_expected_shape():
    model = make_model()
    c = model.config
    full = make_window()
    with pytest.raises(ValueError, match=r"expected shape \(B, T\+1, N\) = \(B, 4, 5\).*got \(4, 5\)"):
        model.training_step(full[0])  # rank 2: the caller must add the batch axis
    with pytest.raises(ValueError, match=r"got \(2, 4, 4\)"):
        model.training_step(full[:, :, :-1])
    with pytest.raises(ValueError, match=r"got \(0, 4, 5\)"):
        model.training_step(full[:0])
    with pytest.raises(ValueError, match=r"\(B, T, N\) = \(B, 3, 5\)"):
        model(full)  # the forward takes the prefix only
    with pytest.raises(ValueError, match="integer token ids"):
        model.training_step(full.double())
    assert c.T == 3


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="d_t must be a positive integer, got 0"):
        FourTensorConfig(**{**CFG, "d_t": 0})
    with pytest.raises(ValueError, match="dropout"):
        FourTensorConfig(**{**CFG, "dropout": 1.0})
    with pytest.raises(ValueError, match="end_ids"):
        FourTensorConfig(**{**CFG, "end_ids": (PAD,)})
    cfg = FourTensorConfig(**{**CFG, "end_ids": (3, 4)})
    assert FourTensorConfig.from_dict(cfg.to_dict()) == cfg


def test_save_load_gives_identical_logits(tmp_path):
    model = make_model(dtype=torch.float32, end_ids=(5,), slice_causal=True)
    ids = make_window()[:, :-1]
    model.save_pretrained(tmp_path / "m")
    for loaded in (FourTensorModel.from_pretrained(tmp_path / "m"), load_predictor(tmp_path / "m")):
        assert isinstance(loaded, FourTensorModel) and loaded.config == model.config
        assert torch.equal(loaded.eval()(ids), model(ids))


def test_load_errors_name_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_predictor(tmp_path)
    make_model(dtype=torch.float32).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: no model.safetensors"):
        load_predictor(tmp_path)


def test_slice_causal_option_hides_later_sentences():
    full = make_window(seed=3)
    changed = full.clone()
    changed[:, 2, :3] = 7  # input sentence t = 2
    for causal in (False, True):
        model = make_model(slice_causal=causal)
        a, b = model(full[:, :-1]), model(changed[:, :-1])
        earlier_same = torch.allclose(a[:, :, :2], b[:, :, :2])
        assert earlier_same == causal
        assert not torch.allclose(a[:, :, 2], b[:, :, 2])


def test_predict_next_and_decoding_rule():
    assert cut_at_end(torch.tensor([[4, 5, 9, 5, 6]]), (5,), PAD).tolist() == [[4, 5, 0, 0, 0]]
    assert cut_at_end(torch.tensor([[4, 6]]), (), PAD).tolist() == [[4, 6]]
    model = make_model(end_ids=(5,))
    ids = make_window()[:, :-1]
    pred, state = model.predict_next(ids, state="carried")
    assert pred.shape == (2, model.config.N) and state == "carried"
    logits = model(ids)[:, :, -1].clone()
    logits[..., PAD] = -math.inf
    assert torch.equal(pred, cut_at_end(logits.argmax(-1), (5,), PAD))


def test_score_sums_match_a_manual_count():
    model = make_model()
    c = model.config
    full = make_window()
    s = model.score(full)
    last = model(full[:, :-1])[:, :, -1]
    gold = full[:, -1]
    live = gold != PAD
    assert s["last_tokens"] == live.sum().item() and s["sentences"] == 2
    ce = F.cross_entropy(last[live], gold[live], reduction="sum").item()
    assert s["last_ce_sum"] == pytest.approx(ce)
    assert s["last_correct"] == ((last.argmax(-1) == gold) & live).sum().item()
    assert s["selection_count"] == (full[:, 1:] != PAD).sum().item()
    assert s["selection_loss_sum"] / s["selection_count"] == pytest.approx(model.training_step(full).item())
    assert 0 <= s["exact_sentences"] <= 2 and c.end_ids == ()


def test_meta_count_equals_real_count():
    model = make_model()
    assert count_parameters(model.config) == sum(p.numel() for p in model.parameters())


def test_sinusoidal_embedding_fills_sin_cos_pairs_and_leaves_the_odd_widths_last_slot_zero():
    """Slot 2i holds sin(pos / 10000^(2i/dim)) and 2i+1 the cos; with an odd width the leftover last slot is 0."""
    from models.four_tensor_input import sinusoidal_pe

    positions = torch.tensor([0.0, 1.0, 2.5, 7.0], dtype=torch.float64)
    for dim in (5, 7):
        pe = sinusoidal_pe(positions, dim)  # (4, dim)
        assert pe.shape == (4, dim)
        for i in range(dim // 2):
            angle = positions / 10000.0 ** (2 * i / dim)
            assert torch.allclose(pe[:, 2 * i], torch.sin(angle))
            assert torch.allclose(pe[:, 2 * i + 1], torch.cos(angle))
        assert torch.equal(pe[:, -1], torch.zeros(4, dtype=torch.float64))
    even = sinusoidal_pe(positions, 6)
    assert torch.allclose(
        even[:, -1], torch.cos(positions / 10000.0 ** (4 / 6))
    )  # no slot left over at even widths
