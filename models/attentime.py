"""Attentime (seeds/attentime-sto.txt), top to bottom: names and checks, the Time matrix (two parameterisations),
the Dynamic Value (original and separable), multi-head attention with an incremental cache, a Pre-LN block, the
1-D causal LM with the GPT-2 baseline's interface, and the joint attention over the 4-tensor model's (x, t) grid.

Notation used for tensor shapes:
    B  batch           L, Lq, Lk  sequence / query / key length      V  vocabulary (of the pair Time table)
    H  heads           dh  width of one head (d = H * dh in the 1-D model; a full fiber d_x * d_t on the grid)
    u  the Dynamic Value gate's pre-activation W QK, one vector per token

The attention of query A over key B (both carry a time t_A, t_B, e.g. a position or a sentence index):
    P_AB  = <QK_A, QK_B> / sqrt(dh)                   one projection for both sides, so P is symmetric
    log T = learned, finite where t_B <= t_A; -inf where t_B > t_A (the causal diode: weight exactly 0)
    alpha = softmax_B(P_AB + log T_AB)
    out_A = sum_B alpha_AB DV_{B->A}
    DV (original)  = QK_B * sigmoid(W (QK_A - QK_B))  = QK_B * sigmoid(u_A - u_B)
    DV (separable) = QK_B * sigmoid(-u_B) * 2 sigmoid(u_A) = f(QK_B) * h(QK_A)

Sign convention: the seed writes dt = t_B - t_A and calls dt < 0 "future", which is backwards (with t_B < t_A the
key is in the past). Here the gap is dt = t_A - t_B >= 0 for a key at or before the query; a key with t_B > t_A is
later than the query and gets weight exactly zero. The factor 2 in h and the shared W in f and h are our choice
(the seed names f and h only): with them the two forms agree exactly at W = 0 and to first order in W
(sigmoid(a - b) ~ 1/2 + (a - b)/4 ~ 2 sigmoid(a) sigmoid(-b)); they are not the same function elsewhere.
The separable form needs only per-key quantities (QK_B and f(QK_B)), so it decodes with a cache like a KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import Tensor, nn

from models.baseline import BaselineConfig, BaselineModel

MODEL_KIND = "attentime_lm"
ATTENTION_KINDS = ("four_tensor", "attentime")  # the 4-tensor model's `attention` config field
DV_FORMS = ("original", "separable")
TIME_KINDS = ("gap", "pair")


# ----------------------------------------------------------------------------------------------------------------
# Names and checks


def check_attention_name(name: object) -> str:
    """The 4-tensor model's attention kind; a ValueError names the bad value and the known ones otherwise."""
    if name not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention {name!r}; known attention kinds: {', '.join(ATTENTION_KINDS)}")
    return str(name)


def _check_choice(what: str, value: object, known: tuple[str, ...]) -> str:
    if value not in known:
        raise ValueError(f"{what} must be one of {', '.join(known)}, got {value!r}")
    return str(value)


# ----------------------------------------------------------------------------------------------------------------
# Time: log T (B, H, Lq, Lk), finite for keys at or before the query, -inf (exactly zero weight) after it


def causal_diode(t_q: Tensor, t_k: Tensor) -> Tensor:
    """(B, Lq), (B, Lk) times -> (B, 1, Lq, Lk) bool, True where the key is later than the query (t_B > t_A)."""
    return (t_k[:, None, :] > t_q[:, :, None])[:, None]


class GapTime(nn.Module):
    """log T_h(dt) = rate_h * dt over the gap dt = t_A - t_B >= 0, one learned rate per head, shared by all tokens.

    rate < 0 is exponential decay, 0 steady retention, > 0 growth (the seed's three regimes). Initial rates are
    spread over heads, -1/2, -1/4, ... (slowly decaying heads beside fast ones; an ALiBi-like start, our choice).
    """

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.rate = nn.Parameter(-(2.0 ** -torch.arange(1, n_heads + 1, dtype=torch.float32)))  # (H,)

    def forward(
        self, t_q: Tensor, t_k: Tensor, ids_q: Tensor | None = None, ids_k: Tensor | None = None
    ) -> Tensor:
        dt = (t_q[:, :, None] - t_k[:, None, :]).to(self.rate.dtype)  # (B, Lq, Lk)
        log_t = self.rate[None, :, None, None] * dt[:, None]  # (B, H, Lq, Lk)
        return log_t.masked_fill(causal_diode(t_q, t_k), float("-inf"))


class PairTime(nn.Module):
    """log T[h, v_A, v_B]: one learned entry per head and (query token, key token) pair, the seed's continual-learning
    Time matrix. It does not depend on the gap; the diode still zeroes every later key. Starts at 0 (T = 1)."""

    def __init__(self, n_heads: int, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.table = nn.Parameter(torch.zeros(n_heads, vocab_size, vocab_size))  # (H, V, V)

    def forward(
        self, t_q: Tensor, t_k: Tensor, ids_q: Tensor | None = None, ids_k: Tensor | None = None
    ) -> Tensor:
        if ids_q is None or ids_k is None:
            raise ValueError("PairTime needs the token ids of queries and keys (ids_q, ids_k), got None")
        hi = max(int(ids_q.max()), int(ids_k.max())) if ids_q.numel() and ids_k.numel() else 0
        lo = min(int(ids_q.min()), int(ids_k.min())) if ids_q.numel() and ids_k.numel() else 0
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(
                f"per-token-pair Time matrix has vocabulary {self.vocab_size}, but token ids range over [{lo}, {hi}]"
            )
        H, V = self.table.shape[0], self.vocab_size
        flat = ids_q[:, :, None] * V + ids_k[:, None, :]  # (B, Lq, Lk) index of the pair (v_A, v_B)
        log_t = self.table.reshape(H, V * V)[:, flat]  # (H, B, Lq, Lk)
        log_t = rearrange(log_t, "h b q k -> b h q k")
        return log_t.masked_fill(causal_diode(t_q, t_k), float("-inf"))


# ----------------------------------------------------------------------------------------------------------------
# The attention rule itself, on per-head tensors


def attention_weights(scores: Tensor, log_t: Tensor, key_pad: Tensor | None) -> Tensor:
    """alpha = softmax(P + log T) over keys: scores (B, H, Lq, Lk), log_t broadcastable -> (B, H, Lq, Lk).

    key_pad (B, Lk) True at padding keys. A padding key the diode lets through gets the dtype's smallest finite
    score (the 4-tensor model's rule): beside any live key its weight underflows to exactly 0, and a query that
    sees only padding spreads its weight uniformly over it. A query with no key at or before it (every key -inf)
    gets all-zero weights and a zero output, never NaN.
    """
    s = scores + log_t  # -inf stays -inf: the diode
    if key_pad is not None:
        s = s.masked_fill(key_pad[:, None, None, :] & torch.isfinite(s), torch.finfo(s.dtype).min)
    empty = torch.isneginf(s).all(dim=-1, keepdim=True)  # (B, H, Lq, 1) rows with nothing to attend to
    alpha = F.softmax(s.masked_fill(empty, 0.0), dim=-1)
    return alpha.masked_fill(empty, 0.0)


def mix_original(alpha: Tensor, qk_k: Tensor, u_q: Tensor, u_k: Tensor) -> Tensor:
    """sum_B alpha_AB QK_B * sigmoid(u_A - u_B): alpha (B, H, Lq, Lk), qk_k / u_k (B, H, Lk, dh), u_q (B, H, Lq, dh).

    The per-pair gate is formed explicitly, (B, H, Lq, Lk, dh): the form the seed calls not cacheable.
    """
    gate = torch.sigmoid(u_q[:, :, :, None, :] - u_k[:, :, None, :, :])  # (B, H, Lq, Lk, dh)
    return einsum(alpha, gate, qk_k, "b h q k, b h q k e, b h k e -> b h q e")


def separable_value(qk: Tensor, u: Tensor) -> Tensor:
    """f(QK_B) = QK_B * sigmoid(-u_B), the cacheable per-key value: (..., dh) -> (..., dh)."""
    return qk * torch.sigmoid(-u)


def mix_separable(alpha: Tensor, f_k: Tensor, u_q: Tensor) -> Tensor:
    """h(QK_A) * sum_B alpha_AB f(QK_B) with h = 2 sigmoid(u_A): a plain weighted sum of cached values, then a gate."""
    return 2.0 * torch.sigmoid(u_q) * (alpha @ f_k)  # (B, H, Lq, dh)


# ----------------------------------------------------------------------------------------------------------------
# Multi-head Attentime over a 1-D sequence, with the incremental cache


class LayerCache(NamedTuple):
    """What one layer keeps of the keys seen so far (separable form only): everything is per key."""

    qk: Tensor  # (B, H, Lk, dh) QK_B, for the scores
    f: Tensor  # (B, H, Lk, dh) f(QK_B), the values
    times: Tensor  # (B, Lk) t_B
    ids: Tensor  # (B, Lk) token ids (read by the pair Time matrix)


class AttentimeAttention(nn.Module):
    """H heads of width dh = d / H. One projection QK (d -> d), one gate W (d -> d, acting on all heads' QK at
    once, so a head's gate can read the other heads: our choice, which brings the parameter count to within 10% of
    a QKV block), Time per head, output projection (d -> d)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dv_form: str = "separable",
        time: str = "gap",
        vocab_size: int | None = None,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        self.n_heads, self.dh = n_heads, d_model // n_heads
        self.dv_form = _check_choice("dv_form", dv_form, DV_FORMS)
        _check_choice("time", time, TIME_KINDS)
        self.W_qk = nn.Linear(d_model, d_model, bias=False)
        self.W_gate = nn.Linear(d_model, d_model, bias=False)  # no bias: the forms agree at W = 0
        self.W_o = nn.Linear(d_model, d_model)
        if time == "pair":
            if vocab_size is None:
                raise ValueError("time='pair' needs vocab_size (the per-token-pair Time matrix is V x V)")
            self.time: GapTime | PairTime = PairTime(n_heads, vocab_size)
        else:
            self.time = GapTime(n_heads)

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, L, d) -> QK and the gate pre-activation u = W QK, each (B, H, L, dh)."""
        qk = self.W_qk(x)  # (B, L, d)
        u = self.W_gate(qk)
        return (rearrange(z, "b l (h e) -> b h l e", h=self.n_heads) for z in (qk, u))  # type: ignore[return-value]

    def forward(
        self,
        x: Tensor,
        times: Tensor,
        key_pad: Tensor | None = None,
        ids: Tensor | None = None,
        cache: LayerCache | None = None,
        use_cache: bool = False,
    ) -> tuple[Tensor, LayerCache | None]:
        """x (B, L, d) new tokens at times (B, L) -> (B, L, d) and, with use_cache, the cache extended by them.

        key_pad (B, L_past + L) True at padding keys (past and present); ids (B, L) token ids for the pair Time.
        """
        if (cache is not None or use_cache) and self.dv_form != "separable":
            raise ValueError(
                "the incremental cache needs dv_form='separable': the original Dynamic Value "
                "sigmoid(W(QK_A - QK_B)) is formed per (query, key) pair, so there is no per-key value to cache"
            )
        if ids is None:
            ids = torch.zeros_like(times)
        qk_q, u_q = self.heads(x)  # (B, H, L, dh)
        qk_k, u_k, t_k, ids_k = qk_q, u_q, times, ids
        f_k = separable_value(qk_q, u_q) if self.dv_form == "separable" else None
        if cache is not None:
            qk_k = torch.cat([cache.qk, qk_q], dim=2)  # (B, H, Lk, dh)
            f_k = torch.cat([cache.f, f_k], dim=2)  # type: ignore[list-item]
            t_k = torch.cat([cache.times, times], dim=1)  # (B, Lk)
            ids_k = torch.cat([cache.ids, ids], dim=1)
        scores = (qk_q @ qk_k.transpose(-1, -2)) / math.sqrt(self.dh)  # (B, H, L, Lk), symmetric in QK
        alpha = attention_weights(scores, self.time(times, t_k, ids, ids_k), key_pad)
        if self.dv_form == "separable":
            heads = mix_separable(alpha, f_k, u_q)  # type: ignore[arg-type]
        else:
            heads = mix_original(alpha, qk_k, u_q, u_k)
        out = self.W_o(rearrange(heads, "b h l e -> b l (h e)"))  # (B, L, d)
        new_cache = LayerCache(qk_k, f_k, t_k, ids_k) if use_cache else None  # type: ignore[arg-type]
        return out, new_cache


class AttentimeBlock(nn.Module):
    """Pre-LN block: x + drop(Attentime(LN x)), then x + drop(MLP(LN x)), MLP of width mlp_ratio * d with GELU
    (GPT-2's layout). Attentime's attention has 3 d^2 weights to a QKV block's 4 d^2; mlp_ratio 4.5 makes up the
    difference when two models must match in parameter count."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float,
        dv_form: str,
        time: str,
        vocab_size: int | None,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = AttentimeAttention(d_model, n_heads, dv_form, time, vocab_size)
        self.ln_2 = nn.LayerNorm(d_model)
        d_ff = round(mlp_ratio * d_model)
        self.fc = nn.Linear(d_model, d_ff)
        self.proj = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        times: Tensor,
        key_pad: Tensor | None,
        ids: Tensor | None,
        cache: LayerCache | None,
        use_cache: bool,
    ) -> tuple[Tensor, LayerCache | None]:
        a, new_cache = self.attn(self.ln_1(x), times, key_pad, ids, cache, use_cache)
        x = x + self.drop(a)
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln_2(x))))), new_cache


# ----------------------------------------------------------------------------------------------------------------
# The 1-D causal LM: a decoder with GPT2Model's call signature, and the baseline's predictor interface around it


class DecoderOutput(NamedTuple):
    last_hidden_state: Tensor  # (B, L, d) after the final LayerNorm
    cache: list[LayerCache] | None


class AttentimeDecoder(nn.Module):
    """Token table, Attentime blocks, final LayerNorm. No position table: order enters only through Time, with the
    position ids as times (the seed's position-independent Query-Key)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        dropout: float = 0.0,
        dv_form: str = "separable",
        time: str = "gap",
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        pair_vocab = vocab_size if time == "pair" else None
        self.h = nn.ModuleList(
            AttentimeBlock(d_model, n_heads, dropout, dv_form, time, pair_vocab, mlp_ratio)
            for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.apply(self._init)
        for block in cast(list[AttentimeBlock], list(self.h)):  # GPT-2's scaled init of the residual writers
            for p in (block.attn.W_o.weight, block.proj.weight):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: list[LayerCache] | None = None,
        use_cache: bool = False,
    ) -> DecoderOutput:
        """input_ids (B, L) new tokens; attention_mask (B, L_past + L), 1 on live tokens; position_ids (B, L) are
        the times (default: L_past, L_past + 1, ...). With a cache only the new tokens are computed."""
        B, L = input_ids.shape
        past = 0 if cache is None else cache[0].times.shape[1]
        if position_ids is None:
            position_ids = torch.arange(past, past + L, device=input_ids.device).expand(B, L)
        key_pad = None if attention_mask is None else attention_mask == 0  # (B, L_past + L)
        x = self.wte(input_ids)  # (B, L, d)
        new: list[LayerCache] = []
        for i, block in enumerate(self.h):
            x, c = block(x, position_ids, key_pad, input_ids, None if cache is None else cache[i], use_cache)
            if c is not None:
                new.append(c)
        return DecoderOutput(self.ln_f(x), new if use_cache else None)


@dataclass
class AttentimeLMConfig(BaselineConfig):
    """BaselineConfig plus the Attentime choices. dv_form: 'separable' (cacheable, the default) or 'original'.
    time: 'gap' (a learned decay per head) or 'pair' (a per-token-pair table over the V+2 ids)."""

    dv_form: str = "separable"
    time: str = "gap"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("AttentimeLMConfig.dv_form", self.dv_form, DV_FORMS)
        _check_choice("AttentimeLMConfig.time", self.time, TIME_KINDS)


class AttentimeLM(BaselineModel):
    """The 1-D baseline with Attentime blocks in place of GPT-2's: the same packing, free-running objective,
    scoring, greedy decoding and files; only `transformer` differs. Decoding uses the separable cache when the
    form allows it and recomputes otherwise."""

    kind = MODEL_KIND
    config_class = AttentimeLMConfig
    config: AttentimeLMConfig

    def __init__(self, config: AttentimeLMConfig) -> None:
        nn.Module.__init__(self)
        if not isinstance(config, AttentimeLMConfig):
            raise ValueError(f"AttentimeLM expects an AttentimeLMConfig, got {type(config).__name__}")
        self.config = config
        self.transformer = AttentimeDecoder(  # type: ignore[assignment]
            config.total_vocab_size,
            config.d_model,
            config.n_heads,
            config.n_layers,
            config.dropout,
            config.dv_form,
            config.time,
        )

    def can_cache(self) -> bool:
        """The cache holds only for the separable form; the original recomputes every step."""
        return self.config.dv_form == "separable"


# ----------------------------------------------------------------------------------------------------------------
# Attentime as the 4-tensor model's joint attention over the (x, t) grid


class AttentimeGridAttention(nn.Module):
    """Drop-in for FourTensorAttention: every head keeps a full fiber d = d_x * d_t and heads are summed (no output
    projection), as in the 4-tensor model. Per head a QK weight and a gate W (d -> d, Xavier like W_Q/W_K/W_V), the
    separable Dynamic Value, and a learned gap decay whose time is the sentence index t of a slot: a query at
    sentence t sees every slot of sentences <= t (all columns x of its own sentence) and nothing later."""

    def __init__(self, n_heads: int, d_x: int, d_t: int) -> None:
        super().__init__()
        self.n_heads, self.d = n_heads, d_x * d_t
        W = torch.empty(2, n_heads, self.d, self.d)
        for z in W.view(-1, self.d, self.d):
            nn.init.xavier_uniform_(z)
        self.W_qk = nn.Parameter(W[0].clone())  # (H, d_out, d_in)
        self.W_gate = nn.Parameter(W[1].clone())
        self.time = GapTime(n_heads)

    def forward(self, X: Tensor, key_mask: Tensor, future_mask: Tensor | None = None) -> Tensor:
        """X (B, N, T, d_x, d_t), key_mask (B, N, T) True at padding -> summed head outputs, same shape.

        future_mask is accepted for the FourTensorAttention signature and not needed: the diode already removes
        every later sentence.
        """
        B, N, T = X.shape[:3]
        x = X.reshape(B, N * T, self.d)  # (B, NT, d), slot s = x * T + t
        qk = einsum(x, self.W_qk, "b s i, h o i -> b h s o")  # (B, H, NT, d)
        u = einsum(qk, self.W_gate, "b h s i, h o i -> b h s o")
        t = (torch.arange(N * T, device=X.device) % T).expand(B, N * T)  # (B, NT) sentence of each slot
        scores = (qk @ qk.transpose(-1, -2)) / math.sqrt(self.d)  # (B, H, NT, NT)
        alpha = attention_weights(scores, self.time(t, t), key_mask.reshape(B, N * T))
        heads = mix_separable(alpha, separable_value(qk, u), u)  # (B, H, NT, d)
        return heads.sum(dim=1).view_as(X)  # plain sum over heads
