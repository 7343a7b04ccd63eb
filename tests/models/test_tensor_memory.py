"""Faithfulness tests of models/tensor_memory.py against seeds/tensor-memory.txt, and its bad-knob errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from models.tensor_memory import (
    BLOCK_SIZE,
    FactorizedConv3d,
    MemoryState,
    MemoryTap,
    TensorMemoryConfig,
    TensorMemoryEmbedder,
    TensorMemoryInterface,
    cell_grid,
    dense_parameter_count,
    factorized_parameter_count,
    gaussian_write,
    memory_scan,
    memory_step,
    trilinear_read,
    uses_memory,
)


def _interface(seed: int = 0, **kw: object) -> TensorMemoryInterface:
    torch.manual_seed(seed)
    cfg = TensorMemoryConfig(**{"d_emb": 8, "mem_channels": 4, "mem_shape": (2, 3, 5), "chunk_size": 3, **kw})
    return TensorMemoryInterface(cfg)


# ---- coordinates --------------------------------------------------------------------------------------------
def test_coordinate_order_cell_grid_is_x_y_z():
    """grid_cache channel 0 varies along W, 1 along H, 2 along D (grid_sample's order for 5-D inputs)."""
    D, H, W = 2, 3, 5
    g = cell_grid((D, H, W))
    assert g.shape == (1, 3, D, H, W)
    for d in range(D):
        for i in range(H):
            for j in range(W):
                expected = torch.tensor([-1 + 2 * j / (W - 1), -1 + 2 * i / (H - 1), -1 + 2 * d / (D - 1)])
                torch.testing.assert_close(g[0, :, d, i, j], expected)


def test_coordinate_order_write_at_c_is_read_back_strongest_at_c():
    """On an anisotropic grid (D, H, W) = (2, 3, 5), a Gaussian write at every cell's coordinate is read back
    strongest there; a write or a read with two axes swapped would peak at another cell (or fall off the grid)."""
    shape = (2, 3, 5)
    grid = cell_grid(shape)  # (1, 3, D, H, W)
    cells = grid.flatten(2)[0].t()  # (DHW, 3) every cell's (x, y, z)
    for k in range(cells.shape[0]):
        mu = cells[k][None]  # (1, 3)
        volume, w = gaussian_write(mu, torch.tensor([[0.3]]), torch.ones(1, 1), grid)  # (1, 1, D, H, W)
        reads = trilinear_read(volume, cells[None])[0, :, 0]  # (DHW,) read at every cell
        assert int(reads.argmax()) == k
        assert math.isclose(float(reads[k]), 1.0, rel_tol=1e-5)
        assert int(w.flatten().argmax()) == k
    # Between cells the read is trilinear: halfway along x between cells j=0 and j=1 of row 0, depth 0.
    h = torch.zeros(1, 1, *shape)
    h[0, 0, 0, 0, 0], h[0, 0, 0, 0, 1] = 1.0, 3.0
    mid = torch.tensor([[[-0.75, -1.0, -1.0]]])  # x halfway between -1 and -0.5
    torch.testing.assert_close(trilinear_read(h, mid), torch.tensor([[[2.0]]]))


def test_read_uses_border_padding():
    h = torch.arange(2 * 3 * 5, dtype=torch.float32).view(1, 1, 2, 3, 5)
    outside = torch.tensor([[[5.0, -7.0, 9.0]]])  # far beyond x = 1, y = -1, z = 1
    corner = torch.tensor([[[1.0, -1.0, 1.0]]])
    torch.testing.assert_close(trilinear_read(h, outside), trilinear_read(h, corner))


# ---- the factorized conv --------------------------------------------------------------------------------
def test_depthwise_identity_at_init():
    """The spatial part is a no-op at init: the module equals its pointwise 1x1x1 conv alone."""
    torch.manual_seed(0)
    conv = FactorizedConv3d(6, 8)
    x = torch.randn(2, 6, 3, 4, 5)
    torch.testing.assert_close(conv.conv_w(conv.conv_h(conv.conv_d(x))), x)
    torch.testing.assert_close(conv(x), conv.pointwise(x))
    assert torch.all(conv.pointwise.bias == 0)
    # Xavier uniform bound on the pointwise weight: sqrt(6 / (fan_in + fan_out)).
    assert conv.pointwise.weight.abs().max() <= math.sqrt(6 / (6 + 8)) + 1e-6
    # After a change of the taps the spatial part does mix neighbours.
    with torch.no_grad():
        conv.conv_w.weight[:, :, :, :, 0] = 0.5
    assert not torch.allclose(conv(x), conv.pointwise(x))


@pytest.mark.parametrize("c_in,c_out", [(2, 4), (8, 16), (32, 64)])
def test_factorized_parameter_count(c_in: int, c_out: int):
    conv = FactorizedConv3d(c_in, c_out)
    n = sum(p.numel() for p in conv.parameters())
    assert n == 9 * c_in + c_in * c_out + c_out == factorized_parameter_count(c_in, c_out)
    dense = nn.Conv3d(c_in, c_out, 3, padding=1)
    assert (
        sum(p.numel() for p in dense.parameters())
        == 27 * c_in * c_out + c_out
        == dense_parameter_count(c_in, c_out)
    )
    assert n < sum(p.numel() for p in dense.parameters())


# ---- embedder, gates, shared coord_net ------------------------------------------------------------------
def test_embedder_sigma_positive_with_positive_initial_bias_and_scale():
    torch.manual_seed(0)
    emb = TensorMemoryEmbedder(8, 4, sigma_scale=0.5, initial_sigma_bias=1.0)
    assert float(emb.sigma.bias.detach()) == 1.0
    x = torch.randn(5, 8) * 10
    content, sigma = emb(x)
    assert content.shape == (5, 4) and sigma.shape == (5, 1)
    assert torch.all(sigma > 0)
    torch.testing.assert_close(sigma, 0.5 * nn.functional.softplus(emb.sigma(x)) + 1e-6)


def test_min_sigma_floors_the_spread_and_zero_is_the_seeds_writer():
    # beyond the seed: a writer driven towards a point (sigma -> eps) keeps at least min_sigma of spread
    torch.manual_seed(0)
    seed_like = TensorMemoryEmbedder(8, 4)
    floored = TensorMemoryEmbedder(8, 4, min_sigma=0.5)
    floored.load_state_dict(seed_like.state_dict())
    with torch.no_grad():
        for emb in (seed_like, floored):
            emb.sigma.bias.fill_(-30.0)  # softplus(-30) ~ 1e-13: the collapsed writer of the recall probe
    x = torch.randn(5, 8)
    (_, s0), (_, s1) = seed_like(x), floored(x)
    assert torch.all(s0 < 1e-5) and torch.allclose(s1, s0 + 0.5)
    assert TensorMemoryConfig(d_emb=8).min_sigma == 0.0


def test_gates_start_at_sigmoid_minus_two():
    tap = MemoryTap(8)
    assert math.isclose(float(torch.sigmoid(tap.gate)), 1 / (1 + math.exp(2.0)), rel_tol=1e-6)
    # The tap adds exactly sigmoid(gate) * memory output to the residual.
    mem = _interface()
    x = torch.randn(2, 7, 8)
    out, _ = tap(x, mem, None)
    mem_out, _ = mem(tap.norm(x), None)
    torch.testing.assert_close(out, x + torch.sigmoid(torch.tensor(-2.0)) * mem_out)


def test_read_and_write_share_one_coord_net():
    """One coord_net, no second head; write coordinates move when (and only when) it changes."""
    mem = _interface()
    linears_to_3 = [m for m in mem.modules() if isinstance(m, nn.Linear) and m.out_features == 3]
    assert linears_to_3 == [mem.coord_net]
    # A token presented as read input and as write input lands on the same coordinate.
    x = torch.randn(4, 8)
    torch.testing.assert_close(mem.coords(x), torch.tanh(mem.coord_net(x)))
    assert torch.all(mem.coords(x * 100).abs() <= 1)
    # Both the read and the write depend on coord_net: a gradient reaches it from a read-only loss (reads of
    # chunks after the first) and from a write-only loss (the final state).
    tokens = torch.randn(2, 9, 8)
    out, state = mem(tokens)
    g_read = torch.autograd.grad(out[:, 3:].sum(), mem.coord_net.weight, retain_graph=True)[0]
    g_write = torch.autograd.grad(state.h.sum(), mem.coord_net.weight)[0]
    assert g_read.abs().sum() > 0 and g_write.abs().sum() > 0


# ---- chunking -------------------------------------------------------------------------------------------
def test_chunk_padding_and_trimming():
    mem = _interface(chunk_size=3)
    tokens = torch.randn(2, 7, 8)  # 7 tokens -> 3 chunks, the last padded with 2 zero tokens
    read_in, write_in = mem.chunk(tokens)
    assert read_in.shape == (2, 3, 8) and write_in.shape == (2, 3, 8)
    torch.testing.assert_close(read_in, tokens[:, [0, 3, 6]])  # first token of each chunk
    padded = torch.cat([tokens, torch.zeros(2, 2, 8)], dim=1).view(2, 3, 24)
    torch.testing.assert_close(write_in, mem.write_proj(padded))  # learned projection of the whole chunk
    out, _ = mem(tokens)
    assert out.shape == (2, 7, 8)  # trimmed back to n
    for k in range(3):  # each chunk's read is repeated over its tokens
        chunk = out[:, 3 * k : 3 * k + 3]
        torch.testing.assert_close(chunk, chunk[:, :1].expand_as(chunk))
    # Padding is on the right: the first two chunks do not depend on the length of the last one.
    out6, _ = mem(tokens[:, :6])
    torch.testing.assert_close(out6, out[:, :6])


def test_blocked_scan_equals_flat_per_step_loop():
    mem = _interface(chunk_size=1)
    torch.manual_seed(1)
    B, S, C = 2, 2 * BLOCK_SIZE + 5, 4
    state = MemoryState(torch.randn(B, C, 2, 3, 5), torch.randn(B, C, 2, 3, 5))
    rc, wc = torch.rand(B, S, 3) * 2 - 1, torch.rand(B, S, 3) * 2 - 1
    content, sigma = torch.randn(B, S, C), torch.rand(B, S, 1) + 0.1
    reads, end = memory_scan(mem.conv, mem.grid_cache, state, rc, wc, content, sigma)
    flat_reads, s = [], state
    for t in range(S):
        r, s = memory_step(mem.conv, mem.grid_cache, s, rc[:, t], wc[:, t], content[:, t], sigma[:, t])
        flat_reads.append(r)
    torch.testing.assert_close(reads, torch.stack(flat_reads, dim=1), rtol=0, atol=0)
    torch.testing.assert_close(end.h, s.h, rtol=0, atol=0)
    torch.testing.assert_close(end.c, s.c, rtol=0, atol=0)
    # Any block size is the same function.
    reads3, end3 = memory_scan(mem.conv, mem.grid_cache, state, rc, wc, content, sigma, block_size=3)
    torch.testing.assert_close(reads3, reads, rtol=0, atol=0)
    torch.testing.assert_close(end3.c, end.c, rtol=0, atol=0)


def test_step_reads_before_writing_and_updates_like_an_lstm():
    mem = _interface()
    B, C = 2, 4
    state = MemoryState(torch.randn(B, C, 2, 3, 5), torch.randn(B, C, 2, 3, 5))
    rc, wc, content, sigma = torch.rand(B, 3), torch.rand(B, 3), torch.randn(B, C), torch.full((B, 1), 0.4)
    read, new = memory_step(mem.conv, mem.grid_cache, state, rc, wc, content, sigma)
    torch.testing.assert_close(read, trilinear_read(state.h, rc[:, None])[:, 0])
    volume, _ = gaussian_write(wc, sigma, content, mem.grid_cache)
    i, f, o, g = mem.conv(torch.cat([volume, state.h], dim=1)).chunk(4, dim=1)
    c = torch.sigmoid(f) * state.c + torch.sigmoid(i) * torch.tanh(g)
    torch.testing.assert_close(new.c, c)
    torch.testing.assert_close(new.h, torch.sigmoid(o) * torch.tanh(c))


def test_interface_state_threads_across_calls():
    """Two calls with the state carried equal one call over the concatenated tokens (whole chunks)."""
    mem = _interface(chunk_size=3)
    tokens = torch.randn(2, 12, 8)
    out, state = mem(tokens)
    out_a, s = mem(tokens[:, :6])
    out_b, s = mem(tokens[:, 6:], s)
    torch.testing.assert_close(torch.cat([out_a, out_b], dim=1), out)
    torch.testing.assert_close(s.h, state.h)


def test_read_every_token_uses_coord_net_and_out_proj():
    mem = _interface()
    h = torch.randn(2, 4, 2, 3, 5)
    tokens = torch.randn(2, 6, 8)
    expected = mem.out_proj(trilinear_read(h, torch.tanh(mem.coord_net(tokens))))
    torch.testing.assert_close(mem.read(h, tokens), expected)


# ---- compile, gradients, size ---------------------------------------------------------------------------
def test_compiled_equals_eager():
    mem = _interface(chunk_size=2)
    tokens = torch.randn(2, 11, 8)
    eager_out, eager_state = mem(tokens)
    try:
        compiled = torch.compile(memory_scan, backend="aot_eager", dynamic=False)
        mem._scan = compiled
        out, state = mem(tokens)
    except Exception as err:  # pragma: no cover - a torch build without dynamo
        pytest.skip(f"torch.compile unavailable: {err}")
    torch.testing.assert_close(out, eager_out)
    torch.testing.assert_close(state.h, eager_state.h)
    torch.testing.assert_close(state.c, eager_state.c)
    # compile=True without Triton (this CPU machine) keeps the eager scan: identical results by construction.
    torch.manual_seed(0)
    m2 = _interface(compile=True)
    m1 = _interface()
    m2.load_state_dict(m1.state_dict())
    torch.testing.assert_close(m2(tokens)[0], m1(tokens)[0])


def test_gradcheck_float64_tiny_grid():
    torch.manual_seed(0)
    cfg = TensorMemoryConfig(d_emb=3, mem_channels=2, mem_shape=(2, 2, 3), chunk_size=2)
    mem = TensorMemoryInterface(cfg).double()
    tokens = torch.randn(1, 5, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 2, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(1, 2, 2, 2, 3, dtype=torch.float64, requires_grad=True)

    def f(tok: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, s = mem(tok, MemoryState(h, c))
        return out, s.h, s.c

    assert torch.autograd.gradcheck(f, (tokens, h0, c0), eps=1e-6, atol=1e-5)
    # Gradients also reach every parameter.
    out, s = mem(tokens, MemoryState(h0, c0))
    (out.sum() + s.h.sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mem.parameters())


def test_memory_state_same_size_for_10_and_10000_tokens():
    mem = _interface(chunk_size=16)
    with torch.no_grad():
        _, short = mem(torch.randn(1, 10, 8))
        _, long = mem(torch.randn(1, 10_000, 8))
    assert short.h.shape == long.h.shape == (1, 4, 2, 3, 5)
    assert short.c.shape == long.c.shape
    assert torch.isfinite(long.h).all() and torch.isfinite(long.c).all()


def test_memory_every_n_layers():
    assert [uses_memory(layer, 1) for layer in range(4)] == [True] * 4
    assert [uses_memory(layer, 2) for layer in range(4)] == [True, False, True, False]


# ---- bad knobs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw,name",
    [
        ({"mem_shape": (0, 4, 4)}, "mem_shape"),
        ({"mem_shape": (4, 4)}, "mem_shape"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"sigma_scale": 0.0}, "sigma_scale"),
        ({"sigma_scale": -1.0}, "sigma_scale"),
        ({"mem_channels": 0}, "mem_channels"),
        ({"memory_every_n_layers": 0}, "memory_every_n_layers"),
        ({"d_emb": 0}, "d_emb"),
        ({"min_sigma": -0.1}, "min_sigma"),
    ],
)
def test_bad_knobs_are_refused_by_name(kw: dict[str, object], name: str):
    with pytest.raises(ValueError, match=name):
        TensorMemoryConfig(**{"d_emb": 8, **kw})


def test_config_round_trip():
    cfg = TensorMemoryConfig(d_emb=8, mem_shape=(2, 3, 5), chunk_size=4, sigma_scale=0.5)
    assert TensorMemoryConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown"):
        TensorMemoryConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_tokens_of_wrong_width_are_refused():
    with pytest.raises(ValueError, match="tokens"):
        _interface()(torch.randn(2, 5, 7))


def test_forget_bias_sets_only_the_f_block_and_defaults_to_the_seed():
    seed = _interface()
    assert torch.all(seed.conv.pointwise.bias == 0)  # the seed: pointwise bias 0
    mem = _interface(forget_bias=2.0)
    b = mem.conv.pointwise.bias.detach().view(4, 4)  # (i, f, o, g) blocks of C = 4 channels
    assert torch.all(b[1] == 2.0) and torch.all(b[[0, 2, 3]] == 0)
    # A write then survives longer: after 6 steps of zero content, more of the first write is left in c.
    B, C = 1, 4
    rc = torch.zeros(B, 3)

    def left_after(m: TensorMemoryInterface) -> float:
        s = m.init_state(B)
        _, s = memory_step(m.conv, m.grid_cache, s, rc, rc, torch.full((B, C), 3.0), torch.full((B, 1), 0.5))
        first = s.c.abs().sum()
        for _ in range(6):
            _, s = memory_step(m.conv, m.grid_cache, s, rc, rc, torch.zeros(B, C), torch.full((B, 1), 0.5))
        return float(s.c.abs().sum() / first)

    with torch.no_grad():
        mem.conv.pointwise.weight.copy_(seed.conv.pointwise.weight)
        assert left_after(mem) > 2 * left_after(seed)
