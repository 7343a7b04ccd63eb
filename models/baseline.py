"""The 1-D autoregressive baseline of the paper's section 7: a GPT-2 decoder over the flattened window.

Owns `BaselineConfig`, `BaselineModel` (packing, the free-running objective of section 7.4, greedy decoding, the
shared predictor interface) and its save/load. Built on transformers' `GPT2Model`; nothing here is hand-written
attention.

Notation used for tensor shapes
    B  batch                     T  sentences in the input prefix (the window stores T+1)
    N  token slots per sentence  V  content vocabulary (padding included); [BOS] = V, [EOS] = V+1
    P  packed prefix length      K  free-running / decoding steps (<= N+1)
    d  model width d_x*d_t       V2 = V+2, the baseline's readout size

How it maps onto the paper
    * Packing (7.1, 7.5): padding is stripped from every sentence, the prefix is [BOS] + S(0)..S(T-1) with no
      separator, and the target is S(T) + [EOS]. Prefixes are left-padded inside a batch so that every row's last
      live position is the last column and one KV-cached step appends one token to every row; position ids are
      counted over live tokens only, so a padded row computes exactly what it computes alone.
    * Width d = d_x*d_t, MLP 4d (GELU), Pre-LN blocks, a final LayerNorm (GPT-2's ln_f) and a readout tied to the
      token table (logits = h @ wte^T, computed only at the last live position).
    * Dropout: GPT-2's `resid_pdrop` sits on the output of the attention branch and of the MLP branch, i.e. on both
      residual branches. `embd_pdrop` (on the residual stream itself) and `attn_pdrop` (on attention
      probabilities) are set to 0, so dropout acts on the residual branches only, as in section 8.2.
    * Free-running objective (7.4): the logit at the last live position is scored against the gold token of that
      step, its argmax is appended (an integer, so nothing flows back through it) and the next step conditions on
      the model's own token. The KV cache holds differentiable keys/values, so the cached loop has exactly the
      gradient of recomputing the whole sequence at every step (tested); it is used for training too. One dropout
      mask is drawn per position, when that position is first computed.

Parameter count. With |V| = 36,711 (+2), d_x = 64, d_t = 32, H = 4 the paper's table 5 gives 175.9M (L = 2) and
226.2M (L = 3). This model has one extra table, GPT-2's learned position embedding `wpe` of
n_positions * d = (1 + T*N + N) * d = 81 * 2048 = 165,888 parameters. Without it the counts are 175,908,864
(175.9M) and 226,267,136 (226.27M, 0.07M above the paper's 226.2M, within 0.1M: the paper's figures match a count
that leaves out biases and LayerNorms, 175,851,520 and 226,183,168); with it they are 176.07M and 226.43M.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2Config, GPT2Model

from models.checks import check_token_ids
from models.hub import SavedModel
from models.shape import SHAPE_FIELDS, PredictorConfig

logger = logging.getLogger(__name__)

MODEL_KIND = "baseline"


# ----------------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class BaselineConfig(PredictorConfig):
    """Configuration of the 1-D baseline; the same fields as every predictor config.

    Args:
        vocab_size: content vocabulary size V (padding included). [BOS] and [EOS] are appended as ids V and V+1.
        d_x, d_t: the 4-tensor fibers this baseline is matched to; its width is d = d_x * d_t.
        n_heads: attention heads; d is split across them (d must be divisible by n_heads).
        n_layers: number of Pre-LN GPT-2 blocks.
        N: token slots per sentence. T: sentences in the input prefix (a stored window holds T+1).
        dropout: rate p on both residual branches (attention output and MLP output).
        padding_idx: the padding id of the stored windows; stripped when packing, never used as [BOS]/[EOS].
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"BaselineConfig.n_heads={self.n_heads} must divide the width d = d_x*d_t = {self.d_model}"
            )

    # Derived sizes ---------------------------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        """Width d = d_x * d_t (section 7.3)."""
        return self.d_x * self.d_t

    @property
    def bos_id(self) -> int:
        return self.vocab_size

    @property
    def eos_id(self) -> int:
        return self.vocab_size + 1

    @property
    def total_vocab_size(self) -> int:
        """Readout size: content vocabulary plus [BOS] and [EOS]."""
        return self.vocab_size + 2

    @property
    def n_positions(self) -> int:
        """[BOS] + T*N context tokens + N generated tokens: the longest sequence the model ever reads."""
        return 1 + self.T * self.N + self.N

    # Serialisation --------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaselineConfig:
        """Build from a dict; keys that are not fields (e.g. "semworld_model") are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def from_predictor(cls, cfg: Any) -> BaselineConfig:
        """The baseline matched to any predictor config (same V, fibers, heads, depth, N, T, dropout, padding)."""
        return cls(**{name: getattr(cfg, name) for name in (*SHAPE_FIELDS, "dropout", "padding_idx")})

    def gpt2_config(self) -> GPT2Config:
        """The inner GPT-2's configuration (see the module docstring for the dropout placement)."""
        d = self.d_model
        return GPT2Config(
            vocab_size=self.total_vocab_size,
            n_positions=self.n_positions,
            n_embd=d,
            n_layer=self.n_layers,
            n_head=self.n_heads,
            n_inner=4 * d,
            activation_function="gelu",  # exact GELU, as in the 4-tensor MLP
            resid_pdrop=self.dropout,  # both residual branches
            embd_pdrop=0.0,  # not on the residual stream
            attn_pdrop=0.0,  # not on attention probabilities
            layer_norm_epsilon=1e-5,
            bos_token_id=self.bos_id,
            eos_token_id=self.eos_id,
            pad_token_id=self.padding_idx,
            tie_word_embeddings=True,
            use_cache=True,
        )


# ----------------------------------------------------------------------------------------------------------------
# Packing
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class PackedWindow:
    """A batch of windows flattened for the 1-D model.

    prefix:      (B, P) [BOS] + S(0)..S(T-1) without padding, padded on `side` with padding_idx
    prefix_mask: (B, P) 1 on live tokens, 0 on batch padding
    gold:        (B, N+1) S(T) without padding, then [EOS], then padding_idx (never read)
    gold_len:    (B,) number of gold tokens per row, [EOS] included (1 .. N+1)
    """

    prefix: Tensor
    prefix_mask: Tensor
    gold: Tensor
    gold_len: Tensor


@dataclass
class FreeRunResult:
    """What one free-running pass produced.

    loss_sum:    CE summed over every gold token, [EOS] included (the selection loss numerator)
    loss_count:  number of those tokens
    content_sum: CE summed over the content tokens of S(T) only ([EOS] dropped)
    content_count: their number
    tokens:      (B, K) the argmax fed back at each step (the model's own tokens)
    logits:      (B, K, V2) per-step logits at the last live position, only when asked for
    """

    loss_sum: Tensor
    loss_count: Tensor
    content_sum: Tensor
    content_count: Tensor
    tokens: Tensor
    logits: Tensor | None = None


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------


def _add_gold_ce(
    sums: tuple[Tensor, Tensor, Tensor, Tensor], logits: Tensor, gold: Tensor, active: Tensor, eos_id: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One free-running step's CE added to (loss_sum, loss_count, content_sum, content_count): logits (B, V2)
    against gold (B,) on the `active` rows (B,), every gold token and, apart, the content ones ([EOS] dropped)."""
    loss_sum, loss_count, content_sum, content_count = sums
    loss_sum = loss_sum + F.cross_entropy(logits[active], gold[active], reduction="sum")
    loss_count = loss_count + active.sum()
    is_content = active & (gold != eos_id)  # drop [EOS]: the same slots as 4-tensor S(T)
    if bool(is_content.any()):
        content_sum = content_sum + F.cross_entropy(logits[is_content], gold[is_content], reduction="sum")
        content_count = content_count + is_content.sum()
    return loss_sum, loss_count, content_sum, content_count


class BaselineModel(SavedModel):
    """Decoder-only causal transformer over [BOS] + S(0)..S(T-1), asked for S(T) + [EOS] (paper section 7)."""

    kind = MODEL_KIND
    config_class = BaselineConfig

    def __init__(self, config: BaselineConfig) -> None:
        super().__init__()
        if not isinstance(config, BaselineConfig):
            raise ValueError(f"BaselineModel expects a BaselineConfig, got {type(config).__name__}")
        self.config = config
        # GPT-2's own init: N(0, 0.02), c_proj scaled by 1/sqrt(2L). wte doubles as the tied readout.
        self.transformer = GPT2Model(config.gpt2_config())

    # Embedding table / readout ---------------------------------------------------------------------------------
    @property
    def wte(self) -> nn.Embedding:
        return self.transformer.wte

    def readout(self, h: Tensor) -> Tensor:
        """Tied readout: (..., d) -> (..., V2) logits against the token table."""
        return F.linear(h, self.transformer.wte.weight)

    # Input checks ----------------------------------------------------------------------------------------------
    def _check_ids(self, token_ids: Tensor, n_sentences: int, what: str) -> None:
        axis = "T+1" if n_sentences == self.config.T + 1 else "T"
        check_token_ids(
            token_ids, n_sentences, self.config.N, name=what, axis=axis, vocab_size=self.config.vocab_size
        )

    # Packing ---------------------------------------------------------------------------------------------------
    def pack(self, token_ids: Tensor, side: str = "left") -> PackedWindow:
        """Flatten windows (B, T+1, N) or prefixes (B, T, N) into [BOS] + S(0)..S(T-1) (+ gold when present).

        Padding is stripped from each sentence and nothing separates the sentences. `side` says where the batch
        padding of the prefix goes ("left" puts every row's last live token in the last column).
        """
        if side not in ("left", "right"):
            raise ValueError(f"side must be 'left' or 'right', got {side!r}")
        cfg = self.config
        B, S, N = token_ids.shape  # S = T+1 (window) or T (prefix only)
        has_gold = S == cfg.T + 1
        device = token_ids.device
        live = token_ids != cfg.padding_idx  # (B, S, N)
        ctx = token_ids[:, : cfg.T].reshape(B, cfg.T * N)  # (B, T*N) sentences in reading order
        ctx_live = live[:, : cfg.T].reshape(B, cfg.T * N)
        lengths = 1 + ctx_live.sum(dim=1)  # (B,) [BOS] + live context tokens
        P = int(lengths.max())
        prefix = torch.full((B, P), cfg.padding_idx, dtype=torch.long, device=device)
        mask = torch.zeros((B, P), dtype=torch.long, device=device)
        bos = torch.tensor([cfg.bos_id], dtype=torch.long, device=device)
        for b in range(B):
            row = torch.cat([bos, ctx[b][ctx_live[b]].long()])  # (len_b,)
            n = row.numel()
            cols = slice(P - n, P) if side == "left" else slice(0, n)
            prefix[b, cols] = row
            mask[b, cols] = 1
        gold = torch.full((B, N + 1), cfg.padding_idx, dtype=torch.long, device=device)
        gold_len = torch.zeros(B, dtype=torch.long, device=device)
        if has_gold:
            for b in range(B):
                content = token_ids[b, cfg.T][live[b, cfg.T]].long()  # (n_b,) S(T) without padding
                n = content.numel()
                gold[b, :n] = content
                gold[b, n] = cfg.eos_id
                gold_len[b] = n + 1
        return PackedWindow(prefix=prefix, prefix_mask=mask, gold=gold, gold_len=gold_len)

    # Forward ---------------------------------------------------------------------------------------------------
    def forward_last(self, ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Logits at each row's last live position: ids (B, L) -> (B, V2), left- or right-padded rows.

        Position ids count live tokens only, so padding (on either side) changes nothing for a row.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(ids)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, L)
        out = self.transformer(
            input_ids=ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )
        h = out.last_hidden_state  # (B, L, d), after ln_f
        cols = torch.arange(ids.shape[1], device=ids.device)
        last = (attention_mask.bool() * cols).amax(dim=1)  # (B,) index of the last live column
        h_last = h[torch.arange(ids.shape[0], device=ids.device), last]  # (B, d)
        return self.readout(h_last)

    def can_cache(self) -> bool:
        """Whether free_run may decode with the key/value cache (GPT-2 always may)."""
        return True

    def free_run(
        self,
        packed: PackedWindow,
        n_steps: int,
        use_cache: bool = True,
        return_logits: bool = False,
        stop_when_done: bool = False,
    ) -> FreeRunResult:
        """The free-running loop of section 7.4 from a left-packed prefix.

        Step k reads the logit at the last live position, adds CE against gold[:, k] for rows still inside their
        gold span (k < gold_len) and appends the argmax of that logit, detached, for every row. Rows past their
        span are inactive: they keep decoding but add nothing. With `stop_when_done` the loop also ends once every
        row is past its gold span and has emitted [EOS] or N tokens (greedy evaluation needs nothing more).
        """
        cfg = self.config
        ids, mask = packed.prefix, packed.prefix_mask  # (B, P)
        if bool((mask[:, -1] == 0).any()):
            raise ValueError("free_run expects a left-padded prefix (pack(..., side='left'))")
        if ids.shape[1] + n_steps - 1 > cfg.n_positions:
            raise ValueError(
                f"n_steps={n_steps} after a prefix of {ids.shape[1]} tokens exceeds n_positions={cfg.n_positions}"
            )
        B = ids.shape[0]
        device = ids.device
        zero = torch.zeros((), device=device)
        loss_sum, content_sum = zero, zero
        loss_count = torch.zeros((), dtype=torch.long, device=device)
        content_count = torch.zeros((), dtype=torch.long, device=device)
        tokens: list[Tensor] = []
        all_logits: list[Tensor] = []
        eos_seen = torch.zeros(B, dtype=torch.bool, device=device)
        cache = None
        step_ids = ids
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, P)
        next_pos = mask.sum(dim=1)  # (B,) position id of the next appended token
        use_cache = use_cache and self.can_cache()
        for k in range(n_steps):
            if use_cache:
                logits, cache = self._cached_step(step_ids, mask, positions, cache)  # (B, V2)
            else:
                logits = self.forward_last(ids, mask)  # (B, V2), whole sequence recomputed
            gold_k = (
                packed.gold[:, k] if k < packed.gold.shape[1] else torch.full_like(next_pos, cfg.padding_idx)
            )
            active = k < packed.gold_len  # (B,)
            if bool(active.any()):
                loss_sum, loss_count, content_sum, content_count = _add_gold_ce(
                    (loss_sum, loss_count, content_sum, content_count), logits, gold_k, active, cfg.eos_id
                )
            hat = logits.argmax(dim=-1).detach()  # (B,) the model's own token; an integer, no gradient
            tokens.append(hat)
            if return_logits:
                all_logits.append(logits)
            eos_seen = eos_seen | (hat == cfg.eos_id)
            if stop_when_done:
                done = (k + 1 >= packed.gold_len) & (eos_seen | (k + 1 >= cfg.N))
                if bool(done.all()):
                    break
            if k + 1 < n_steps:  # append the argmax; the last one is never read
                step_ids = hat[:, None]  # (B, 1)
                ids = torch.cat([ids, step_ids], dim=1)  # (B, P+k+1)
                mask = torch.cat([mask, torch.ones_like(step_ids)], dim=1)
                positions = torch.cat([positions, next_pos[:, None]], dim=1)
                next_pos = next_pos + 1
        return FreeRunResult(
            loss_sum=loss_sum,
            loss_count=loss_count,
            content_sum=content_sum,
            content_count=content_count,
            tokens=torch.stack(tokens, dim=1),  # (B, K)
            logits=torch.stack(all_logits, dim=1) if return_logits else None,  # (B, K, V2)
        )

    def _cached_step(
        self, step_ids: Tensor, mask: Tensor, positions: Tensor, cache: Any
    ) -> tuple[Tensor, Any]:
        """One KV-cached decoding step: the new tokens `step_ids` (B, S) after the cached past, `mask` (B, P+k)
        over past and present -> the logits at the last position (B, V2) and the grown cache."""
        out = self.transformer(
            input_ids=step_ids,
            attention_mask=mask,  # (B, P+k): past and present
            position_ids=positions[:, -step_ids.shape[1] :],
            cache=cache,
            use_cache=True,
        )
        return self.readout(out.last_hidden_state[:, -1]), out.cache

    def _decode(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Greedy string from the fed-back tokens (B, K): content up to [EOS], at most N tokens.

        Returns (B, N) ids padded with padding_idx and the (B,) number of content tokens.
        """
        cfg = self.config
        B, K = tokens.shape
        out = torch.full((B, cfg.N), cfg.padding_idx, dtype=torch.long, device=tokens.device)
        lengths = torch.zeros(B, dtype=torch.long, device=tokens.device)
        for b in range(B):
            row = tokens[b]
            eos = (row == cfg.eos_id).nonzero()
            n = int(eos[0]) if eos.numel() else K
            n = min(n, cfg.N)
            out[b, :n] = row[:n]
            lengths[b] = n
        return out, lengths

    # The shared predictor interface ----------------------------------------------------------------------------
    def training_step(self, token_ids_full: Tensor) -> Tensor:
        """(B, T+1, N) -> free-running CE over the gold tokens of S(T) and [EOS] (the selection loss)."""
        self._check_ids(token_ids_full, self.config.T + 1, "token_ids_full")
        packed = self.pack(token_ids_full)
        res = self.free_run(packed, n_steps=int(packed.gold_len.max()))
        return res.loss_sum / res.loss_count

    @torch.no_grad()
    def score(self, token_ids_full: Tensor) -> dict[str, float]:
        """Evaluation sums over the batch (see the interface): free-running CE and greedy decoding in one pass.

        The CE pass and greedy decoding feed back the same argmax tokens, so one loop serves both: it runs for
        the gold span (CE) and until [EOS] or N content tokens (the decoded string).
        """
        cfg = self.config
        self._check_ids(token_ids_full, cfg.T + 1, "token_ids_full")
        packed = self.pack(token_ids_full)
        n_steps = max(int(packed.gold_len.max()), cfg.N)
        res = self.free_run(packed, n_steps=n_steps, stop_when_done=True)
        hat, hat_len = self._decode(res.tokens)  # (B, N), (B,)
        gold_content = packed.gold[:, : cfg.N].clone()  # (B, N)
        gold_n = packed.gold_len - 1
        for b in range(gold_content.shape[0]):
            gold_content[b, int(gold_n[b]) :] = cfg.padding_idx
        cols = torch.arange(cfg.N, device=hat.device)
        on_gold = cols[None, :] < gold_n[:, None]  # (B, N) positions of gold content tokens
        correct = ((hat == gold_content) & on_gold & (cols[None, :] < hat_len[:, None])).sum()
        exact = ((hat_len == gold_n) & ((hat == gold_content) | ~on_gold).all(dim=1)).sum()
        return {
            "selection_loss_sum": float(res.loss_sum),
            "selection_count": float(res.loss_count),
            "last_ce_sum": float(res.content_sum),
            "last_tokens": float(res.content_count),
            "last_correct": float(correct),
            "exact_sentences": float(exact),
            "sentences": float(token_ids_full.shape[0]),
        }

    @torch.no_grad()
    def predict_next(self, token_ids: Tensor, state: object | None = None) -> tuple[Tensor, object | None]:
        """(B, T, N) prefix -> (B, N) greedy next state, stopped at [EOS] or N tokens, padded; state is unused.

        An untrained model may emit [BOS]; it has no content id and is written as padding.
        """
        cfg = self.config
        self._check_ids(token_ids, cfg.T, "token_ids")
        packed = self.pack(token_ids)
        res = self.free_run(packed, n_steps=cfg.N, stop_when_done=True)
        hat, _ = self._decode(res.tokens)
        hat[hat >= cfg.vocab_size] = cfg.padding_idx
        return hat, None

    @torch.no_grad()
    def next_logits(self, token_ids: Tensor, state: object | None = None) -> tuple[Tensor, object | None]:
        """(B, T, N) prefix -> logits (B, N, V) of the N greedy decoding steps over the content vocabulary
        ([BOS]/[EOS] columns dropped), and the unused state.

        Step i is conditioned on the greedy tokens 0..i-1, so these are the distributions along predict_next's
        own path, not independent per-slot marginals as in the 4-tensor model: a search over them (e.g.
        pipeline/projection.py) is an approximation for this model. An [EOS] at step i is what ends the state.
        """
        cfg = self.config
        self._check_ids(token_ids, cfg.T, "token_ids")
        res = self.free_run(self.pack(token_ids), n_steps=cfg.N, return_logits=True)
        assert res.logits is not None
        return res.logits[:, :, : cfg.vocab_size], None  # (B, N, V)


def count_parameters(config: BaselineConfig, include_positions: bool = True) -> int:
    """Parameter count of a BaselineModel built on the meta device (no memory allocated).

    `include_positions=False` leaves out GPT-2's learned position table (n_positions * d), which the paper's
    count does not have (see the module docstring).
    """
    with torch.device("meta"):
        model = BaselineModel(config)
    total = sum(p.numel() for p in model.parameters())
    return total if include_positions else total - model.transformer.wpe.weight.numel()
