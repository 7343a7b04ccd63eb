"""The 4-tensor predictor's configuration and its input construction (Step 1, Stages A-D of
seeds/four-tensor-attention.txt): token ids (B, T, N) -> X (B, N, T, d_x, d_t) = S + P + T_emb.

Shapes in the notation of models/four_tensor.py; the flat fiber index is phi(n, q) = n * d_t + q.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from einops import einsum
from torch import Tensor, nn

from models.shape import PredictorConfig
from models.tensor_memory import TensorMemoryConfig

# ----------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass
class FourTensorConfig(PredictorConfig):
    """Hyper-parameters of the 4-tensor predictor; saved as config.json beside the weights.

    The shape (vocab_size, d_x, d_t, n_heads, n_layers, N, T), dropout and padding_idx are those of every
    predictor (models.shape.PredictorConfig); here the H full-fiber heads of a layer are summed.
    end_ids: sentence-final token ids ('.', '!', '?'); a decoded sentence stops after the first one (empty: no
    cut). slice_causal: beyond the paper; when True a query at sentence t may not attend to keys at t' > t, so
    every slice is a forecast rather than a copy of the next input sentence. attention: "four_tensor" (the
    paper's rank-4 QKV attention) or "attentime" (models/attentime.py: symmetric Query-Key, Time over the
    sentence axis as a causal diode, separable Dynamic Value; the dense path serves every call). memory: beyond
    the paper, a tensor memory (models/tensor_memory.py, d_emb = d_x * d_t) for what has left the window; None:
    no memory.
    """

    end_ids: tuple[int, ...] = ()
    slice_causal: bool = False
    attention: str = "four_tensor"
    memory: TensorMemoryConfig | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.end_ids = tuple(int(i) for i in self.end_ids)
        for i in self.end_ids:
            if not 0 <= i < self.vocab_size or i == self.padding_idx:
                raise ValueError(
                    f"FourTensorConfig.end_ids must be non-padding ids below vocab_size={self.vocab_size}, got {i}"
                )
        if not isinstance(self.slice_causal, bool):
            raise ValueError(f"FourTensorConfig.slice_causal must be a bool, got {self.slice_causal!r}")
        from models.attentime import check_attention_name  # lazy: it imports the baseline (transformers)

        self.attention = check_attention_name(self.attention)
        if isinstance(self.memory, dict):
            self.memory = TensorMemoryConfig.from_dict({"d_emb": self.d_x * self.d_t, **self.memory})
        if self.memory is not None:
            if not isinstance(self.memory, TensorMemoryConfig):
                raise ValueError(
                    f"FourTensorConfig.memory must be a TensorMemoryConfig or None, got {self.memory!r}"
                )
            if self.memory.d_emb != self.d_x * self.d_t:
                raise ValueError(
                    f"FourTensorConfig.memory.d_emb must be d_x * d_t = {self.d_x * self.d_t}, got {self.memory.d_emb}"
                )

    @property
    def d(self) -> int:
        """Joint fiber width d_x * d_t."""
        return self.d_x * self.d_t

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["end_ids"] = list(self.end_ids)
        out["memory"] = None if self.memory is None else self.memory.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FourTensorConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known - {"semworld_model"})
        if unknown:
            raise ValueError(f"FourTensorConfig: unknown field(s) {unknown}")
        kwargs = {k: v for k, v in d.items() if k in known}
        if "end_ids" in kwargs:
            kwargs["end_ids"] = tuple(kwargs["end_ids"])
        return cls(**kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Step 1: input construction (Stages A-D)


def sinusoidal_pe(positions: Tensor, dim: int) -> Tensor:
    """(...,) real positions -> (..., dim): even slot 2i holds sin(pos / 10000^(2i/dim)), odd slot 2i+1 the cos.

    With an odd dim the last slot stays zero.
    """
    half = dim // 2
    i = torch.arange(half, device=positions.device, dtype=positions.dtype)
    angle = positions.unsqueeze(-1) / (10000.0 ** (2 * i / dim))  # (..., half)
    pe = positions.new_zeros(*positions.shape, dim)
    pe[..., 0 : 2 * half : 2] = torch.sin(angle)
    pe[..., 1 : 2 * half : 2] = torch.cos(angle)
    return pe


def fiber_norm(ln: nn.LayerNorm, X: Tensor) -> Tensor:
    """LayerNorm over the joint (n, q) fiber at index phi(n, q) = n * d_t + q.

    (B, N, T, d_x, d_t) -> same, or a packed list of slots (n, d_x, d_t) -> same.
    """
    return ln(X.flatten(-2)).view_as(X)  # (..., d) with d = d_x * d_t


class InputConstruction(nn.Module):
    """Dual-dictionary outer-product embedding plus P (phase x) and the joint-phase T_emb (phase x + t)."""

    keep_rows: Tensor  # (V,) buffers, rebuilt from the config (not saved)
    P: Tensor  # (N, d_x)
    Temb: Tensor  # (N, T, d_t)

    def __init__(self, config: FourTensorConfig) -> None:
        super().__init__()
        c = config
        self.padding_idx = c.padding_idx
        # Stage A dictionaries; the padding row is zero at init, and _tables() keeps it out of every path.
        self.E_sem = nn.Embedding(c.vocab_size, c.d_x, padding_idx=c.padding_idx)
        self.E_temp = nn.Embedding(c.vocab_size, c.d_t, padding_idx=c.padding_idx)
        keep = torch.ones(c.vocab_size)
        keep[c.padding_idx] = 0.0
        self.register_buffer("keep_rows", keep, persistent=False)  # (V,)
        x_idx = torch.arange(c.N, dtype=torch.float32)
        t_idx = torch.arange(c.T, dtype=torch.float32)
        # Stage B: P[x, n], phase x. Stage D: Temb[x, t, q], phase x + t (column independent, offset consistent).
        self.register_buffer("P", sinusoidal_pe(x_idx, c.d_x), persistent=False)  # (N, d_x)
        phase = x_idx[:, None] + t_idx[None, :]  # (N, T)
        self.register_buffer("Temb", sinusoidal_pe(phase, c.d_t), persistent=False)  # (N, T, d_t)

    def tables(self) -> tuple[Tensor, Tensor]:
        """E_sem (V, d_x) and E_temp (V, d_t) with the padding row forced to zero.

        The readout reuses E_sem, so nn.Embedding's padding_idx alone would let the readout path write a gradient
        into the padding row; multiplying by keep_rows holds that row at zero on every path.
        """
        keep = self.keep_rows.to(self.E_sem.weight.dtype)[:, None]
        return self.E_sem.weight * keep, self.E_temp.weight * keep

    def forward(self, token_ids: Tensor) -> Tensor:
        """token_ids (B, T, N) -> X (B, N, T, d_x, d_t) = S + P + T_emb."""
        E_sem, E_temp = self.tables()
        e_n = F.embedding(token_ids, E_sem)  # (B, T, N, d_x)
        e_q = F.embedding(token_ids, E_temp)  # (B, T, N, d_t)
        # Stages A and C: outer product per slot, stored with the column axis before the sentence axis.
        S = einsum(e_n, e_q, "b t x n, b t x q -> b x t n q")  # (B, N, T, d_x, d_t)
        S = S + self.P[None, :, None, :, None]  # Stage B: broadcast over t and q
        return S + self.Temb[None, :, :, None, :]  # Stage D: broadcast over n

    def slots(self, ids: Tensor, x: Tensor, t: Tensor) -> Tensor:
        """The same X for a packed list of slots: ids, columns x and sentences t, each (n,) -> (n, d_x, d_t)."""
        E_sem, E_temp = self.tables()
        S = F.embedding(ids, E_sem)[:, :, None] * F.embedding(ids, E_temp)[:, None, :]  # (n, d_x, d_t)
        S = S + self.P[x][:, :, None]  # Stage B: P[x, n], broadcast over q
        return S + self.Temb[x, t][:, None, :]  # Stage D: Temb[x, t, q], broadcast over n
