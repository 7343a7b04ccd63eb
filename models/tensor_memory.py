"""Tensor memory (seeds/tensor-memory.txt), top to bottom: config, factorized 3-D conv, Gaussian write, trilinear
read, the per-step LSTM recurrence and its blocked scan, the embedder, the token interface, and the per-layer tap
that adds the gated memory read to a residual stream.

Notation used for tensor shapes:
    B  batch                 C  memory channels (width of one cell)      D, H, W  memory grid (depth, height, width)
    n  tokens in a call      E  token width (d_emb)                      K  tokens per chunk (chunk_size)
    S  memory steps (chunks in a call, S = ceil(n / K))
The state is a pair (h, c), each (B, C, D, H, W): h is what reads see, c the LSTM cell it is gated from.
A coordinate is a point of [-1, 1]^3 stored as (x, y, z) = (width, height, depth), the order F.grid_sample uses
for 5-D inputs; the cached cell grid, the Gaussian write and the trilinear read all use that order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

logger = logging.getLogger(__name__)

BLOCK_SIZE = 16  # steps per outer block of the scan (a tighter graph for torch.compile; same function)
EPS = 1e-6  # keeps sigma > 0 and the Gaussian's denominator away from zero


# ----------------------------------------------------------------------------------------------------------------
# Configuration


@dataclass
class TensorMemoryConfig:
    """Knobs of one tensor memory; saved with the model that owns it (each knob but d_emb is also a flag of
    `semworld train predictor --memory`).

    d_emb: E, width of the tokens that read and write (in the 4-tensor model d_x * d_t).
    mem_channels: C, memory channels per cell.
    mem_shape: the fixed memory grid (D, H, W).
    chunk_size: K tokens per memory step; the last chunk of a call is right-padded (chunk_size = N in the 4-tensor
        model: one step per state and layer).
    sigma_scale: multiplier on the writer's softplus spread.
    initial_sigma_bias: bias of the spread's linear at init (positive, so a fresh writer spreads instead of
        writing a point).
    gate_init: every memory layer's gate logit at init (-2: the gate starts at sigmoid(-2) = 0.12, the memory as
        a small addend).
    memory_every_n_layers: layers l with l % n == 0 touch the memory; the others run attention and MLP only.
    compile: wrap the scan in torch.compile when Triton is available (identical results without it).
    forget_bias: initial bias of the forget gate f (0: none, as in seeds/tensor-memory.txt). With 0, f starts near
        1/2 and a write fades by half at every step, so nothing written survives long enough for its gradient to
        be found (docs/history.md); 1-3 is the usual LSTM remedy.
    min_sigma: a floor added to the writer's spread, in grid units ([-1, 1] per axis); 0 leaves only the eps of
        seeds/tensor-memory.txt. A writer whose spread reaches the eps floor writes almost nothing anywhere, and
        its gradient dies with it (docs/tensor-memory.md, the recall probe).
    """

    d_emb: int
    mem_channels: int = 16
    mem_shape: tuple[int, int, int] = (4, 4, 4)
    chunk_size: int = 16
    sigma_scale: float = 1.0
    initial_sigma_bias: float = 1.0
    gate_init: float = -2.0
    memory_every_n_layers: int = 1
    compile: bool = False
    forget_bias: float = 0.0
    min_sigma: float = 0.0

    def __post_init__(self) -> None:
        for name in ("d_emb", "mem_channels", "memory_every_n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TensorMemoryConfig.{name} must be a positive integer, got {value!r}")
        shape = tuple(self.mem_shape) if isinstance(self.mem_shape, list | tuple) else None
        if (
            shape is None
            or len(shape) != 3
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape)
        ):
            raise ValueError(
                f"TensorMemoryConfig.mem_shape must be three positive integers (D, H, W), got {self.mem_shape!r}"
            )
        self.mem_shape = (int(shape[0]), int(shape[1]), int(shape[2]))
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(
                f"TensorMemoryConfig.chunk_size must be an integer >= 1, got {self.chunk_size!r}"
            )
        for name in ("sigma_scale", "initial_sigma_bias", "gate_init", "forget_bias", "min_sigma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"TensorMemoryConfig.{name} must be a finite number, got {value!r}")
            setattr(self, name, float(value))
        if self.sigma_scale <= 0:
            raise ValueError(f"TensorMemoryConfig.sigma_scale must be > 0, got {self.sigma_scale!r}")
        if self.min_sigma < 0:
            raise ValueError(f"TensorMemoryConfig.min_sigma must be >= 0, got {self.min_sigma!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"TensorMemoryConfig.compile must be a bool, got {self.compile!r}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mem_shape"] = list(self.mem_shape)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorMemoryConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"TensorMemoryConfig: unknown field(s) {unknown}")
        kwargs = dict(d)
        if "mem_shape" in kwargs and isinstance(kwargs["mem_shape"], list):
            kwargs["mem_shape"] = tuple(kwargs["mem_shape"])
        return cls(**kwargs)


class MemoryState(NamedTuple):
    """(h, c), each (B, C, D, H, W). h is read; c is the LSTM cell behind it."""

    h: Tensor
    c: Tensor

    def detach(self) -> MemoryState:
        return MemoryState(self.h.detach(), self.c.detach())


# ----------------------------------------------------------------------------------------------------------------
# Factorized 3-D convolution: depthwise 3-tap along D, H, W, then a pointwise channel mix


class FactorizedConv3d(nn.Module):
    """A stand-in for a dense 3x3x3 Conv3d: three depthwise 3-tap convs (D, then H, then W) and a 1x1x1 mix.

    Parameters: 9 * C_in (depthwise, no bias) + C_in * C_out + C_out (pointwise) against 27 * C_in * C_out + C_out
    for the dense kernel. At init the depthwise taps are the identity (centre 1, sides 0), so the module starts as
    a pure pointwise mixer and spatial mixing grows in with training; the pointwise weight is Xavier, bias 0.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        c = in_channels
        self.conv_d = nn.Conv3d(c, c, (3, 1, 1), padding=(1, 0, 0), groups=c, bias=False)
        self.conv_h = nn.Conv3d(c, c, (1, 3, 1), padding=(0, 1, 0), groups=c, bias=False)
        self.conv_w = nn.Conv3d(c, c, (1, 1, 3), padding=(0, 0, 1), groups=c, bias=False)
        self.pointwise = nn.Conv3d(c, out_channels, 1)
        self._init_identity()

    def _init_identity(self) -> None:
        with torch.no_grad():
            for conv in (self.conv_d, self.conv_h, self.conv_w):
                conv.weight.zero_()
                conv.weight.view(conv.weight.shape[0], 3)[:, 1] = 1.0  # the centre tap of each 3-tap kernel
            nn.init.xavier_uniform_(self.pointwise.weight)
            assert self.pointwise.bias is not None
            nn.init.zeros_(self.pointwise.bias)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, D, H, W) -> (B, C_out, D, H, W)."""
        return self.pointwise(self.conv_w(self.conv_h(self.conv_d(x))))


# ----------------------------------------------------------------------------------------------------------------
# Addressing: the cell grid, the Gaussian write, the trilinear read


def cell_grid(mem_shape: tuple[int, int, int]) -> Tensor:
    """The [-1, 1]^3 location of every cell, (1, 3, D, H, W), channels in (x, y, z) order.

    Cell (d, i, j) sits at x = linspace(-1, 1, W)[j], y = linspace(-1, 1, H)[i], z = linspace(-1, 1, D)[d]: the
    points grid_sample(align_corners=True) reads exactly, so a read at a cell's coordinate returns that cell.
    """
    D, H, W = mem_shape
    z = torch.linspace(-1.0, 1.0, D) if D > 1 else torch.zeros(1)
    y = torch.linspace(-1.0, 1.0, H) if H > 1 else torch.zeros(1)
    x = torch.linspace(-1.0, 1.0, W) if W > 1 else torch.zeros(1)
    grid_z, grid_y, grid_x = torch.meshgrid(z, y, x, indexing="ij")  # each (D, H, W)
    return torch.stack([grid_x, grid_y, grid_z])[None]  # (1, 3, D, H, W)


def gaussian_write(mu: Tensor, sigma: Tensor, content: Tensor, grid: Tensor) -> tuple[Tensor, Tensor]:
    """Broadcast content around mu with an isotropic Gaussian of spread sigma.

    mu (B, 3) in (x, y, z), sigma (B, 1), content (B, C), grid (1, 3, D, H, W) -> the content volume
    (B, C, D, H, W) = content * w and the weight w = exp(-|p - mu|^2 / (2 sigma^2 + eps)), (B, 1, D, H, W), which is
    returned for diagnostics only (the conv sets every cell's gates, not only those under the Gaussian).
    """
    d2 = (grid - mu[:, :, None, None, None]).pow(2).sum(dim=1, keepdim=True)  # (B, 1, D, H, W)
    w = torch.exp(-d2 / (2.0 * sigma[:, :, None, None, None].pow(2) + EPS))  # (B, 1, D, H, W)
    return content[:, :, None, None, None] * w, w


def trilinear_read(h: Tensor, coord: Tensor) -> Tensor:
    """Read h (B, C, D, H, W) at coord (B, n, 3) in (x, y, z) -> (B, n, C); border padding, differentiable in
    both h and coord."""
    g = coord[:, None, None, :, :]  # (B, 1, 1, n, 3): grid_sample's (D_out, H_out, W_out) = (1, 1, n)
    out = F.grid_sample(h, g, mode="bilinear", padding_mode="border", align_corners=True)  # (B, C, 1, 1, n)
    return rearrange(out, "b c 1 1 n -> b n c")


# ----------------------------------------------------------------------------------------------------------------
# The recurrence: one step per chunk, scanned in outer blocks


def memory_step(
    conv: FactorizedConv3d,
    grid: Tensor,
    state: MemoryState,
    read_coord: Tensor,
    write_coord: Tensor,
    content: Tensor,
    sigma: Tensor,
) -> tuple[Tensor, MemoryState]:
    """One step: read at read_coord (B, 3), write content (B, C) around write_coord (B, 3) with sigma (B, 1).

    Returns the read (B, C), taken before the write, and the new state after the LSTM update of every cell:
    gates (i, f, o, g) = conv([content volume ; h]); c <- f c + i g; h <- o tanh(c).
    """
    h, c = state
    read = trilinear_read(h, read_coord[:, None, :])[:, 0]  # (B, C)
    volume, _ = gaussian_write(write_coord, sigma, content, grid)  # (B, C, D, H, W)
    gates = conv(torch.cat([volume, h], dim=1))  # (B, 4C, D, H, W)
    i, f, o, g = gates.chunk(4, dim=1)  # each (B, C, D, H, W)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return read, MemoryState(h, c)


def memory_scan(
    conv: FactorizedConv3d,
    grid: Tensor,
    state: MemoryState,
    read_coords: Tensor,
    write_coords: Tensor,
    content: Tensor,
    sigma: Tensor,
    block_size: int = BLOCK_SIZE,
) -> tuple[Tensor, MemoryState]:
    """memory_step over S steps: coords (B, S, 3), content (B, S, C), sigma (B, S, 1) -> reads (B, S, C), state.

    The loop runs in outer blocks of block_size steps; that only shapes the traced graph, the function is the flat
    per-step loop.
    """
    S = read_coords.shape[1]
    reads: list[Tensor] = []
    for start in range(0, S, block_size):
        for t in range(start, min(start + block_size, S)):
            r, state = memory_step(
                conv, grid, state, read_coords[:, t], write_coords[:, t], content[:, t], sigma[:, t]
            )
            reads.append(r)
    if not reads:
        return read_coords.new_zeros(read_coords.shape[0], 0, content.shape[-1]), state
    return torch.stack(reads, dim=1), state  # (B, S, C)


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton

        return bool(has_triton())
    except Exception:  # pragma: no cover - torch builds without the helper
        return False


# ----------------------------------------------------------------------------------------------------------------
# Token side: the embedder and the interface


class TensorMemoryEmbedder(nn.Module):
    """A write input (.., E) -> content (.., C) and spread sigma (.., 1) = sigma_scale * softplus(.) + eps.

    The spread's bias starts at initial_sigma_bias > 0, so a fresh writer spreads over the grid rather than
    collapsing to a point before it has anything to spread.
    """

    def __init__(
        self,
        d_emb: int,
        mem_channels: int,
        sigma_scale: float = 1.0,
        initial_sigma_bias: float = 1.0,
        min_sigma: float = 0.0,
    ):
        super().__init__()
        self.sigma_scale = sigma_scale
        self.min_sigma = min_sigma  # beyond the seed: a floor on the spread (0: the seed's eps alone)
        self.content = nn.Linear(d_emb, mem_channels)
        self.sigma = nn.Linear(d_emb, 1)
        nn.init.constant_(self.sigma.bias, initial_sigma_bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.content(x), self.sigma_scale * F.softplus(self.sigma(x)) + self.min_sigma + EPS


class TensorMemoryInterface(nn.Module):
    """Tokens in, per-token memory reads out, with the (h, c) state threaded through.

    forward (the seed's entry point): tokens are cut into chunks of K (right-padded); each chunk is one memory step
    whose read input is its first token and whose write input is a learned projection of all K of its tokens; one
    coord_net places both (tanh into [-1, 1]^3). Each chunk's read goes through out_proj and is repeated over the
    chunk's tokens, then trimmed back to n. read() is the read half alone, for callers (the 4-tensor predictor)
    that let every token read the current state without stepping it.
    """

    grid_cache: Tensor  # (1, 3, D, H, W) buffer, rebuilt from the config (not saved)

    def __init__(self, config: TensorMemoryConfig) -> None:
        super().__init__()
        self.config = cfg = config
        E, C, K = cfg.d_emb, cfg.mem_channels, cfg.chunk_size
        self.coord_net = nn.Linear(E, 3)  # shared by read and write: a slot written at c is read back at c
        self.write_proj = nn.Linear(K * E, E)  # the whole chunk, learned (not a mean)
        self.embedder = TensorMemoryEmbedder(E, C, cfg.sigma_scale, cfg.initial_sigma_bias, cfg.min_sigma)
        self.conv = FactorizedConv3d(2 * C, 4 * C)  # [content volume ; h] -> gates (i, f, o, g)
        if cfg.forget_bias:
            bias = self.conv.pointwise.bias
            assert bias is not None
            with torch.no_grad():
                bias[C : 2 * C] = cfg.forget_bias  # the f block of the gate channels
        self.out_proj = nn.Linear(C, E)
        self.register_buffer("grid_cache", cell_grid(cfg.mem_shape), persistent=False)
        self._scan: Callable[..., tuple[Tensor, MemoryState]] = memory_scan
        if cfg.compile:
            if _has_triton():
                self._scan = torch.compile(memory_scan)
            else:
                logger.info("tensor memory: compile=True but Triton is not available; the scan runs eagerly")

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> MemoryState:
        """Zeros: h and c, each (B, C, D, H, W)."""
        C, (D, H, W) = self.config.mem_channels, self.config.mem_shape
        dtype = dtype or self.out_proj.weight.dtype
        device = device if device is not None else self.out_proj.weight.device
        zeros = torch.zeros(batch_size, C, D, H, W, device=device, dtype=dtype)
        return MemoryState(zeros, zeros.clone())

    def coords(self, x: Tensor) -> Tensor:
        """(.., E) -> (.., 3) in (x, y, z), inside [-1, 1]^3."""
        return torch.tanh(self.coord_net(x))

    def chunk(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """tokens (B, n, E) -> read inputs (B, S, E) (first token of each chunk) and write inputs (B, S, E)."""
        B, n, E = tokens.shape
        K = self.config.chunk_size
        S = -(-n // K)  # ceil(n / K)
        padded = F.pad(tokens, (0, 0, 0, S * K - n))  # (B, S*K, E), zeros on the right
        chunks = padded.view(B, S, K, E)  # (B, S, K, E)
        return chunks[:, :, 0], self.write_proj(chunks.reshape(B, S, K * E))

    def forward(self, tokens: Tensor, state: MemoryState | None = None) -> tuple[Tensor, MemoryState]:
        """tokens (B, n, E), state (h, c) or None (zeros) -> memory output (B, n, E) and the new state."""
        if tokens.dim() != 3 or tokens.shape[-1] != self.config.d_emb:
            raise ValueError(f"tokens: expected (B, n, d_emb={self.config.d_emb}), got {tuple(tokens.shape)}")
        B, n, _ = tokens.shape
        if state is None:
            state = self.init_state(B, tokens.device, tokens.dtype)
        read_in, write_in = self.chunk(tokens)  # (B, S, E) each
        content, sigma = self.embedder(write_in)  # (B, S, C), (B, S, 1)
        reads, state = self._scan(
            self.conv, self.grid_cache, state, self.coords(read_in), self.coords(write_in), content, sigma
        )  # (B, S, C)
        out = self.out_proj(reads)  # (B, S, E)
        out = out.repeat_interleave(self.config.chunk_size, dim=1)[:, :n]  # (B, n, E): broadcast, then trim
        return out, state

    def read(self, h: Tensor, tokens: Tensor) -> Tensor:
        """Every token reads h at its own coordinate (the same coord_net): tokens (B, n, E) -> (B, n, E)."""
        return self.out_proj(trilinear_read(h, self.coords(tokens)))


# ----------------------------------------------------------------------------------------------------------------
# Integration: the per-layer tap on a residual stream


class MemoryTap(nn.Module):
    """What one layer owns of the memory: a LayerNorm on its input and a gate, sigmoid(gate_init) at init.

    The interface itself is shared by the whole stack and passed in; the same (h, c) goes from layer to layer.
    """

    def __init__(self, d_emb: int, gate_init: float = -2.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_emb)
        self.gate = nn.Parameter(torch.tensor(float(gate_init)))

    def forward(
        self, x: Tensor, memory: TensorMemoryInterface, state: MemoryState | None
    ) -> tuple[Tensor, MemoryState]:
        """The seed's block step between attention and MLP: x (B, n, E) -> x + sigmoid(gate) * mem_out, state."""
        mem_out, state = memory(self.norm(x), state)
        return x + torch.sigmoid(self.gate) * mem_out, state


def uses_memory(layer: int, every_n_layers: int) -> bool:
    """Layer l (zero-based) touches the memory when l % every_n_layers == 0 (1: every layer)."""
    return layer % every_n_layers == 0


def factorized_parameter_count(in_channels: int, out_channels: int) -> int:
    """9 * C_in + C_in * C_out + C_out: what FactorizedConv3d holds."""
    return 9 * in_channels + in_channels * out_channels + out_channels


def dense_parameter_count(in_channels: int, out_channels: int) -> int:
    """27 * C_in * C_out + C_out: a dense 3x3x3 Conv3d with bias."""
    return 27 * in_channels * out_channels + out_channels
