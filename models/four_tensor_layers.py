"""The 4-tensor predictor's rank-4 attention (Steps 2-5 of seeds/four-tensor-attention.txt: H full-fiber heads,
summed) and its Pre-LN layer, each on the dense (B, N, T) grid, on the last slice alone, and on a packed list of slots.

Shapes in the notation of models/four_tensor.py; the flat fiber index is phi(n, q) = n * d_t + q.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from models.four_tensor_input import FourTensorConfig, fiber_norm

# ----------------------------------------------------------------------------------------------------------------
# Steps 2-5: rank-4 attention, H full-fiber heads summed


class SlotGrid(NamedTuple):
    """Where each slot of a packed list (n,) sits in a per-row compact grid (B, width) for attention."""

    rows: Tensor  # (n,) batch row
    cols: Tensor  # (n,) rank of the slot among its row's selected slots
    width: int  # most selected slots in any row
    full: bool  # every row has `width` slots: the packed list is the grid, no filler


def pack_slots(sel: Tensor) -> tuple[Tensor, SlotGrid]:
    """sel (B, S) bool -> flat indices b * S + s of the selected slots (n,), row-major, and their SlotGrid."""
    B, S = sel.shape
    flat = sel.reshape(-1).nonzero().squeeze(1)  # (n,)
    cols = (sel.cumsum(dim=1) - 1).reshape(-1)[flat]  # (n,)
    width = int(sel.sum(dim=1).max()) if flat.numel() else 0
    return flat, SlotGrid(flat // S, cols, width, flat.numel() == B * width)


def _to_grid(v: Tensor, at: SlotGrid, B: int) -> Tensor:
    """Packed rows (n, k) -> compact grid (B, width, k), zero at filler cells (masked out by the caller)."""
    if at.full:
        return v.view(B, at.width, v.shape[-1])
    return v.new_zeros(B, at.width, v.shape[-1]).index_put((at.rows, at.cols), v)


def _from_grid(g: Tensor, at: SlotGrid) -> Tensor:
    """Compact grid (B, width, k) -> packed rows (n, k), the inverse of _to_grid on the selected cells."""
    return g.reshape(-1, g.shape[-1]) if at.full else g[at.rows, at.cols]


class LayerStep(NamedTuple):
    """What one layer computes on a packed stream (n slots): which rows are its queries and its keys (None: all),
    their compact grids, and two key masks on the grids."""

    queries: Tensor | None
    keys: Tensor | None
    q_at: SlotGrid
    k_at: SlotGrid
    key_pad: Tensor  # (B, 1, 1, W_k) bool: padding keys (smallest finite score)
    excluded: Tensor  # (B, 1, 1|W_q, W_k) bool: grid filler and slice-causal future keys (-inf)


def _at_least_fp32(x: Tensor) -> Tensor:
    """bf16/fp16 scores (autocast) up to float32 for the softmax; float32 and float64 as they are."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _rank4_weights(n_heads: int, d_x: int, d_t: int) -> nn.Parameter:
    """(H, m, p, n, q) weights; Xavier uniform on each head's flat (m p, n q) matrix, then viewed to rank 4.

    Initialising the rank-4 array directly would take fan-in from its trailing dims and mis-estimate it.
    """
    d = d_x * d_t
    W = torch.empty(n_heads, d, d)
    for h in range(n_heads):
        nn.init.xavier_uniform_(W[h])
    return nn.Parameter(W.view(n_heads, d_x, d_t, d_x, d_t))


class FourTensorAttention(nn.Module):
    """Joint softmax over all N*T keys; every head keeps a full (d_x, d_t) fiber; heads are summed."""

    def __init__(self, config: FourTensorConfig) -> None:
        super().__init__()
        c = config
        self.n_heads, self.d_x, self.d_t = c.n_heads, c.d_x, c.d_t
        self.scale = 1.0 / math.sqrt(c.d_x * c.d_t)  # per head; no 1/sqrt(H) anywhere
        self.W_Q = _rank4_weights(c.n_heads, c.d_x, c.d_t)  # (H, m, p, n, q)
        self.W_K = _rank4_weights(c.n_heads, c.d_x, c.d_t)
        self.W_V = _rank4_weights(c.n_heads, c.d_x, c.d_t)

    def _contract(self, X_flat: Tensor, W: Tensor) -> Tensor:
        """Y[b, s, h, m, p] = sum_{n, q} W[h, m, p, n, q] X[b, s, n, q] on flat fibers: (B, NT, d) -> (B, H, NT, d)."""
        H, d = self.n_heads, self.d_x * self.d_t
        Y = F.linear(X_flat, W.reshape(H * d, d))  # (B, NT, H*d), a view of W: no copy
        return rearrange(Y, "b s (h d) -> b h s d", h=H)

    def probabilities(
        self, X: Tensor, key_mask: Tensor, future_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attention weights (B, H, NT, NT) over flat slots s = x * T + t, and the values V (B, H, NT, d).

        key_mask (B, N, T) is True at padding keys: their scores get the dtype's smallest finite value, so a
        query whose keys are all padding still has a finite maximum and a uniform distribution. Queries are not
        masked. future_mask (NT, NT), True where t' > t, is the optional slice-causal restriction (see config).
        """
        B, N, T, d_x, d_t = X.shape
        X_flat = X.reshape(B, N * T, d_x * d_t)  # (B, NT, d)
        Q = self._contract(X_flat, self.W_Q)  # (B, H, NT, d)
        K = self._contract(X_flat, self.W_K)
        V = self._contract(X_flat, self.W_V)
        scores = self.scale * (Q @ K.transpose(-1, -2))  # (B, H, NT, NT): query s, key s'
        keys = key_mask.reshape(B, 1, 1, N * T)  # (B, 1, 1, NT): key axes only
        scores = scores.masked_fill(keys, torch.finfo(scores.dtype).min)
        if future_mask is not None:
            # Every query keeps its own sentence unmasked here, so -inf never empties a row.
            scores = scores.masked_fill(future_mask, float("-inf"))
        # The softmax in float32 whatever the matmuls ran in (bf16/fp16 autocast on a GPU); a no-op in float32.
        return F.softmax(_at_least_fp32(scores), dim=-1).to(V.dtype), V

    def forward(self, X: Tensor, key_mask: Tensor, future_mask: Tensor | None = None) -> Tensor:
        """X (B, N, T, d_x, d_t) -> summed head outputs, same shape."""
        B, N, T, d_x, d_t = X.shape
        A, V = self.probabilities(X, key_mask, future_mask)
        heads = A @ V  # (B, H, NT, d)
        return heads.sum(dim=1).view(B, N, T, d_x, d_t)  # plain sum over heads

    def last_slice(self, X: Tensor, key_mask: Tensor) -> Tensor:
        """The attention of the last sentence's queries over every key, in fixed shapes (the rollout step):
        X (B, N, T, d_x, d_t) normalised, key_mask (B, N, T) -> summed heads at t = T-1, (B, N, d).

        No key lies after the last sentence, so the slice-causal mask removes nothing here; padding keys get the
        smallest finite score as in forward(), and the softmax runs in float32.
        """
        B, N, T, d_x, d_t = X.shape
        d = d_x * d_t
        Q = self._contract(X[:, :, -1].reshape(B, N, d), self.W_Q)  # (B, H, N, d): the last slice only
        X_flat = X.reshape(B, N * T, d)  # (B, NT, d)
        K = self._contract(X_flat, self.W_K)  # (B, H, NT, d)
        V = self._contract(X_flat, self.W_V)
        scores = _at_least_fp32(self.scale * (Q @ K.transpose(-1, -2)))  # (B, H, N, NT)
        scores = scores.masked_fill(key_mask.reshape(B, 1, 1, N * T), torch.finfo(scores.dtype).min)
        return (F.softmax(scores, dim=-1).to(V.dtype) @ V).sum(dim=1)  # (B, N, d), plain sum over heads

    def packed(self, h_q: Tensor, h_k: Tensor, step: LayerStep) -> Tensor:
        """The same attention for packed slots: queries h_q (n_q, d), keys/values h_k (n_k, d) -> (n_q, d).

        Each row's queries and keys are laid out on compact grids (B, W_q) and (B, W_k). Padding keys get the
        smallest finite score, as in the dense path; grid filler and slice-causal future keys get -inf (weight
        exactly zero, and every query keeps at least one key that is not -inf).

        Without autograd the fused scaled-dot-product kernel adds the same fills as a score bias (its forward
        gives the same distribution, uniform for a query that sees only padding, and is ~10% faster at batch 64).
        With autograd the explicit softmax is used: the kernel's backward rebuilds the weights from a
        log-sum-exp in which finfo.min swallows log(n), so a query that sees only padding would get weights of 1
        instead of 1/n in the gradient.
        """
        H, d = self.n_heads, self.d_x * self.d_t
        B = step.key_pad.shape[0]
        Q = _to_grid(F.linear(h_q, self.W_Q.reshape(H * d, d)), step.q_at, B)  # (B, W_q, H*d)
        K = _to_grid(F.linear(h_k, self.W_K.reshape(H * d, d)), step.k_at, B)  # (B, W_k, H*d)
        V = _to_grid(F.linear(h_k, self.W_V.reshape(H * d, d)), step.k_at, B)
        Q, K, V = (rearrange(Z, "b s (h d) -> b h s d", h=H) for Z in (Q, K, V))  # (B, H, W, d) views
        if not torch.is_grad_enabled():
            bias = torch.zeros(step.excluded.shape, dtype=Q.dtype, device=Q.device)
            bias = bias.masked_fill(step.key_pad, torch.finfo(Q.dtype).min).masked_fill(
                step.excluded, float("-inf")
            )
            heads = F.scaled_dot_product_attention(Q, K, V, attn_mask=bias, scale=self.scale)
        else:
            scores = self.scale * (Q @ K.transpose(-1, -2))  # (B, H, W_q, W_k)
            scores = scores.masked_fill(step.key_pad, torch.finfo(scores.dtype).min)  # key axis only
            scores = scores.masked_fill(step.excluded, float("-inf"))
            heads = F.softmax(scores, dim=-1) @ V  # (B, H, W_q, d)
        return _from_grid(heads.sum(dim=1), step.q_at)  # plain sum over heads, back to the list (n_q, d)


class FourTensorLayer(nn.Module):
    """Pre-LN layer: X' = X + drop(Attn(LN_attn(X))); X_out = X' + drop(MLP(LN_mlp(X'))). No mask reaches the MLP."""

    def __init__(self, config: FourTensorConfig) -> None:
        super().__init__()
        d = config.d
        self.ln_attn = nn.LayerNorm(d)
        self.attention: nn.Module = FourTensorAttention(config)
        if config.attention == "attentime":
            from models.attentime import AttentimeGridAttention

            self.attention = AttentimeGridAttention(config.n_heads, config.d_x, config.d_t)
        self.ln_mlp = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)  # d_ff = 4 d_x d_t
        self.fc2 = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(config.dropout)  # one rate, used on both residual branches only

    def mlp(self, X: Tensor) -> Tensor:
        """Position-wise MLP on the normalised fiber: (B, N, T, d_x, d_t) or packed (n, d_x, d_t) -> same.

        No slot sees another, so a packed list of slots gives each slot exactly its dense result.
        """
        v = self.ln_mlp(X.flatten(-2))  # (..., d)
        return self.fc2(F.gelu(self.fc1(v))).view_as(X)

    def attend(self, X: Tensor, key_mask: Tensor, future_mask: Tensor | None = None) -> Tensor:
        """The attention half: X' = X + drop(Attn(LN_attn(X))), (B, N, T, d_x, d_t) -> same."""
        return X + self.dropout(self.attention(fiber_norm(self.ln_attn, X), key_mask, future_mask))

    def forward(self, X: Tensor, key_mask: Tensor, future_mask: Tensor | None = None) -> Tensor:
        X = self.attend(X, key_mask, future_mask)
        return X + self.dropout(self.mlp(X))

    def last_slice(self, X: Tensor, key_mask: Tensor) -> Tensor:
        """The same layer with only the last sentence as queries: X (B, N, T, d_x, d_t) -> (B, N, d_x, d_t)."""
        assert isinstance(self.attention, FourTensorAttention)  # Attentime runs the dense path only
        attn = self.attention.last_slice(fiber_norm(self.ln_attn, X), key_mask)  # (B, N, d)
        Xq = X[:, :, -1]  # (B, N, d_x, d_t)
        Xq = Xq + self.dropout(attn.view_as(Xq))
        return Xq + self.dropout(self.mlp(Xq))

    def packed(self, X: Tensor, step: LayerStep) -> Tensor:
        """The same layer on a packed stream X (n, d_x, d_t); returns the stream at step.queries (n_q, d_x, d_t)."""
        h = fiber_norm(self.ln_attn, X).flatten(-2)  # (n, d)
        h_q = h if step.queries is None else h[step.queries]
        h_k = h if step.keys is None else h[step.keys]
        assert isinstance(self.attention, FourTensorAttention)  # Attentime runs the dense path only
        attn = self.attention.packed(h_q, h_k, step)  # (n_q, d)
        Xq = X if step.queries is None else X[step.queries]  # (n_q, d_x, d_t)
        Xq = Xq + self.dropout(attn.view_as(Xq))
        return Xq + self.dropout(self.mlp(Xq))
