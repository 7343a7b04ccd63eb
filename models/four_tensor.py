"""The 4-tensor attention predictor (sections 2-5 of seeds/four-tensor-attention.txt). Its parts, read in order:
models/four_tensor_input.py (config, input construction), models/four_tensor_layers.py (rank-4 attention, Pre-LN
layer), then this file, the model: tied rank-1 readout, loss, scoring, decoding, files.

Notation used for tensor shapes (in all three files):
    B  batch                      N  token slots per sentence (spatial column x)
    T  sentences in the input     d_x, d_t  semantic (n) and temporal-context (q) fibers
    H  heads (each a full fiber)  V  vocabulary size        d = d_x * d_t
The flat fiber index is phi(n, q) = n * d_t + q everywhere: the Q/K/V weight view, the LayerNorms, the MLP and
the readout matrix M. Activations are stored as (B, N, T, d_x, d_t); token ids arrive as (B, T, N).
"""

from __future__ import annotations

import logging
from typing import Any, cast

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from models.checks import check_token_ids
from models.four_tensor_input import FourTensorConfig, InputConstruction, fiber_norm
from models.four_tensor_layers import FourTensorLayer, LayerStep, SlotGrid, pack_slots
from models.hub import SavedModel
from models.tensor_memory import (
    MemoryState,
    MemoryTap,
    TensorMemoryInterface,
    uses_memory,
)

logger = logging.getLogger(__name__)

MODEL_KIND = "four_tensor"


# ----------------------------------------------------------------------------------------------------------------
# The model: readout, loss, scoring, decoding, files


def build_pad_mask(token_ids: Tensor, padding_idx: int) -> Tensor:
    """Key mask from token identifiers (never from the norm of X): (B, T, N) -> (B, N, T), True at padding."""
    return rearrange(token_ids == padding_idx, "b t x -> b x t")


def window_cross_entropy(logits: Tensor, Y: Tensor, padding_idx: int, reduction: str = "mean") -> Tensor:
    """Cross-entropy of logits (B, N, T, V) against integer targets Y (B, T, N); padding targets are ignored."""
    tgt = rearrange(Y, "b t x -> (b x t)")  # the (B, T, N) -> (B, N, T) bridge
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt, ignore_index=padding_idx, reduction=reduction
    )


def vocab_probabilities(logits: Tensor) -> Tensor:
    """Diagnostic only: p_xv(t) on the vocabulary simplex, (B, N, T, V). Training never calls it."""
    return F.softmax(logits, dim=-1)


def one_hot_targets(Y: Tensor, vocab_size: int) -> Tensor:
    """Diagnostic only: one-hot targets laid out like the logits, (B, T, N) -> (B, N, T, V). Training never calls it."""
    return F.one_hot(rearrange(Y, "b t x -> b x t"), vocab_size)


def cut_at_end(ids: Tensor, end_ids: tuple[int, ...], padding_idx: int) -> Tensor:
    """Keep each row (..., N) up to and including its first sentence-final id; later slots become padding."""
    if not end_ids:
        return ids
    is_end = torch.zeros_like(ids, dtype=torch.bool)
    for e in end_ids:
        is_end |= ids == e
    # Slots strictly after the first end id: at least one end id at an earlier position.
    after = (torch.cumsum(is_end.long(), dim=-1) - is_end.long()) > 0
    return ids.masked_fill(after, padding_idx)


class FourTensorModel(SavedModel):
    """The 4-tensor predictor: logits (B, N, T, V) for S(1..T) from the window prefix S(0..T-1) in one forward.

    forward() is the dense path, every slot on the (B, N, T) grid, as the paper writes it. training_step, score
    and predict_next compute the same numbers on a packed list of only the slots their result depends on
    (packed_hidden_states): no logits for padding targets or unused slices, no stream for slots nobody reads.
    """

    kind = MODEL_KIND
    config_class = FourTensorConfig

    future_mask: Tensor  # (NT, NT) buffer, True where key sentence t' > query sentence t

    def __init__(self, config: FourTensorConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.input_construction = InputConstruction(c)
        self.layers = nn.ModuleList(FourTensorLayer(c) for _ in range(c.n_layers))
        self.final_norm = nn.LayerNorm(c.d)  # readout-boundary norm on the raw residual sum
        self.W_prime = nn.Parameter(
            torch.empty(c.d_t, c.vocab_size)
        )  # (d_t, V), temporal factor of the readout
        nn.init.xavier_uniform_(self.W_prime)
        s = torch.arange(c.N * c.T)
        t_of = s % c.T  # flat slot s = x * T + t
        self.register_buffer("future_mask", t_of[None, :] > t_of[:, None], persistent=False)  # (NT, NT)
        # Tensor memory (beyond the paper): one interface shared by the stack, a tap (LayerNorm + gate) per layer.
        self.memory: TensorMemoryInterface | None = None
        self.memory_taps = nn.ModuleDict()
        self.memory_read_off = False  # ablation: True drops every memory read (writes still run); not saved
        if c.memory is not None:
            self.memory = TensorMemoryInterface(c.memory)
            for layer in range(c.n_layers):
                if uses_memory(layer, c.memory.memory_every_n_layers):
                    self.memory_taps[str(layer)] = MemoryTap(c.d, c.memory.gate_init)

    # --- input checks ---------------------------------------------------------------------------------------------
    def _check_ids(self, token_ids: Tensor, n_sentences: int, what: str) -> None:
        check_token_ids(token_ids, n_sentences, self.config.N, name="token_ids", axis=what)

    # --- forward --------------------------------------------------------------------------------------------------
    def readout_matrix(self) -> Tensor:
        """M[phi(n, q), v] = E_sem[v, n] * W'[q, v], materialised once per call: (d, V)."""
        E_sem, _ = self.input_construction.tables()
        # One broadcast product written straight into the (n, q, v) order; transposing the small E_sem first
        # makes this about 4x faster than letting einsum write a V-major product and copy it.
        M = E_sem.t().contiguous()[:, None, :] * self.W_prime[None, :, :]  # (d_x, d_t, V)
        return M.view(self.config.d, self.config.vocab_size)  # rows at phi(n, q) = n * d_t + q

    def hidden_states(self, token_ids: Tensor) -> Tensor:
        """token_ids (B, T, N) -> X_norm (B, N, T, d_x, d_t), after the last layer and final_norm."""
        key_mask = build_pad_mask(token_ids, self.config.padding_idx)  # (B, N, T), local to this call
        future = self.future_mask if self.config.slice_causal else None
        X = self.input_construction(token_ids)  # (B, N, T, d_x, d_t)
        for layer in self.layers:
            X = layer(X, key_mask, future)  # every layer reuses this call's mask
        return fiber_norm(self.final_norm, X)

    def packed_hidden_states(self, token_ids: Tensor, wanted: Tensor) -> Tensor:
        """X_norm of the wanted slots only: wanted (B, N, T) bool -> (n_w, d_x, d_t), row-major (b, x, t) order.

        The same numbers as hidden_states(token_ids)[wanted], on fewer slots. Slots meet only in attention, as
        keys, and a padding key gets weight exactly zero (exp(finfo.min - max) underflows) from every query that
        also sees a live key. So the stream is carried for the live keys, the wanted slots, and the padding keys a
        query may see with no live key beside them (its distribution is then uniform over those padding keys):
        a row that is all padding; with slice_causal, the sentences before the row's first live token. The last
        layer computes queries, residuals and the MLP for the wanted slots only.
        """
        c = self.config
        if c.attention == "attentime":  # no packed Attentime path: the dense one, then the wanted slots
            return self.hidden_states(token_ids)[wanted]
        B, NT = token_ids.shape[0], c.N * c.T
        pad = build_pad_mask(token_ids, c.padding_idx)  # (B, N, T), local to this call
        live = ~pad
        if c.slice_causal:
            live_t = live.any(dim=1)  # (B, T)
            first = torch.where(
                live_t.any(dim=1), live_t.int().argmax(dim=1), c.T
            )  # (B,) first live sentence
            t_idx = torch.arange(c.T, device=pad.device)
            keys = live | (t_idx < first[:, None, None])  # (B, N, T)
        else:
            keys = live | ~live.flatten(1).any(dim=1)[:, None, None]  # a row of padding keeps every key
        keys, wanted, pad = keys.reshape(B, NT), wanted.reshape(B, NT), pad.reshape(B, NT)
        stream = keys | wanted  # (B, NT)
        flat, s_at = pack_slots(stream)  # (n,) flat slots b * NT + x * T + t
        k_flat, k_at = pack_slots(keys)
        w_flat, w_at = pack_slots(wanted)
        rank = stream.reshape(-1).cumsum(0) - 1  # (B*NT,) row of each stream slot in the packed list
        k_rows = None if k_flat.numel() == flat.numel() else rank[k_flat]
        w_rows = None if w_flat.numel() == flat.numel() else rank[w_flat]

        key_pad = torch.zeros(B, 1, 1, k_at.width, dtype=torch.bool, device=pad.device)
        key_pad[k_at.rows, 0, 0, k_at.cols] = pad.reshape(-1)[k_flat]  # (B, 1, 1, W_k): padding keys
        filler = torch.ones_like(key_pad)
        filler[k_at.rows, 0, 0, k_at.cols] = False  # grid cells without a key

        def step(rows: Tensor | None, q_flat: Tensor, q_at: SlotGrid) -> LayerStep:
            if not c.slice_causal:
                return LayerStep(rows, k_rows, q_at, k_at, key_pad, filler)
            t_k = torch.full((B, k_at.width), c.T, device=pad.device)  # filler: later than every query
            t_k[k_at.rows, k_at.cols] = k_flat % c.T
            t_q = torch.full((B, q_at.width), c.T - 1, device=pad.device)  # filler queries see every key
            t_q[q_at.rows, q_at.cols] = q_flat % c.T
            future = (t_k[:, None, :] > t_q[:, :, None])[:, None]  # (B, 1, W_q, W_k)
            return LayerStep(rows, k_rows, q_at, k_at, key_pad, filler | future)

        s = flat % NT
        ids = rearrange(token_ids, "b t x -> (b x t)")[flat]  # (n,)
        X = self.input_construction.slots(ids, s // c.T, s % c.T)  # (n, d_x, d_t)
        layers = cast(list[FourTensorLayer], list(self.layers))
        if c.n_layers > 1:
            middle = step(None, flat, s_at)
            for layer in layers[:-1]:
                X = layer.packed(X, middle)  # every layer reuses this call's mask
        X = layers[-1].packed(X, step(w_rows, w_flat, w_at))  # (n_w, d_x, d_t)
        return fiber_norm(self.final_norm, X)

    # --- tensor memory (beyond the paper) -----------------------------------------------------------------------
    # The window is still embedded at positions 0..T-1. The memory holds what has left it: each window writes its
    # slice t = 0 (the sentence that leaves when the window slides), once per memory layer, and every slot of every
    # memory layer reads the state as it stands. A clip streamed window by window therefore writes each of its
    # states exactly once per memory layer, and the (h, c) handed from window to window is all it carries.

    def init_memory(self, batch_size: int, device: torch.device | str | None = None) -> MemoryState:
        """Zero (h, c), each (B, C, D, H, W); ValueError if the model was built without memory."""
        if self.memory is None:
            raise ValueError("this FourTensorModel has no memory (config.memory is None)")
        return self.memory.init_state(batch_size, device)

    def _memory_tap(
        self,
        tap: MemoryTap,
        X: Tensor,
        state: MemoryState,
        writes: Tensor | None,
        recall: tuple[Tensor, list[Tensor]] | None = None,
    ) -> tuple[Tensor, MemoryState]:
        """Between attention and MLP: X (B, N, T, d_x, d_t) + sigmoid(gate) * read, and slice 0 written.

        writes (B,) bool or None (all): rows whose slice 0 is a real sentence; other rows keep their state, so a
        window of front padding writes nothing. recall (h_in, out): the state's h as the window received it;
        the slots of the last slice read it and the reads (B, N, d) are appended to out (window_loss's
        recall term).
        """
        assert self.memory is not None
        B, N, T, d_x, d_t = X.shape
        u = tap.norm(X.flatten(-2))  # (B, N, T, d) the tap's LayerNorm on its input
        if recall is not None:
            recall[1].append(self.memory.read(recall[0], u[:, :, -1]))  # (B, N, d)
        if not self.memory_read_off:
            reads = self.memory.read(state.h, rearrange(u, "b x t d -> b (x t) d"))  # (B, N*T, d): every slot
            X = X + torch.sigmoid(tap.gate) * reads.view(B, N, T, d_x, d_t)
        _, new = self.memory(
            u[:, :, 0], state
        )  # (B, N, d) tokens of the leaving sentence, chunks of chunk_size
        if writes is not None:
            keep = ~writes[:, None, None, None, None]  # (B, 1, 1, 1, 1)
            new = MemoryState(torch.where(keep, state.h, new.h), torch.where(keep, state.c, new.c))
        return X, new

    def memory_hidden_states(
        self, token_ids: Tensor, state: MemoryState | None, recall: list[Tensor] | None = None
    ) -> tuple[Tensor, MemoryState]:
        """token_ids (B, T, N), state (h, c) or None (zeros) -> X_norm (B, N, T, d_x, d_t) and the state after
        this window's writes. The dense path: every slot, memory taps between attention and MLP. recall: a list
        that receives, per memory layer, the reads (B, N, d) of the last slice's slots from the state as it came
        in (before this window's writes)."""
        c = self.config
        if self.memory is None:
            raise ValueError("this FourTensorModel has no memory (config.memory is None)")
        B = token_ids.shape[0]
        if state is None:
            state = self.init_memory(B, token_ids.device)
        key_mask = build_pad_mask(token_ids, c.padding_idx)  # (B, N, T), local to this call
        writes = (token_ids[:, 0] != c.padding_idx).any(dim=-1)  # (B,) slice 0 holds a sentence
        future = self.future_mask if c.slice_causal else None
        X = self.input_construction(token_ids)  # (B, N, T, d_x, d_t)
        incoming = None if recall is None else (state.h, recall)
        for i, layer in enumerate(cast(list[FourTensorLayer], list(self.layers))):
            X = layer.attend(X, key_mask, future)
            if str(i) in self.memory_taps:
                X, state = self._memory_tap(
                    cast(MemoryTap, self.memory_taps[str(i)]), X, state, writes, incoming
                )
            X = X + layer.dropout(layer.mlp(X))
        return fiber_norm(self.final_norm, X), state

    @torch.no_grad()
    def stream_memory(self, token_ids: Tensor, state: MemoryState | None = None) -> MemoryState:
        """A history (B, L, N), L >= T -> the memory after the windows starting at 0..L-T-1 have each written
        their slice 0, i.e. the state predict_next wants with the last window token_ids[:, L-T:]. O(L) windows.

        Front padding (all-padding states, e.g. histories of different lengths aligned at the end) writes nothing.
        """
        c = self.config
        if token_ids.dim() != 3 or token_ids.shape[1] < c.T or token_ids.shape[2] != c.N:
            raise ValueError(f"token_ids: expected (B, L >= T={c.T}, N={c.N}), got {tuple(token_ids.shape)}")
        state = state if state is not None else self.init_memory(token_ids.shape[0], token_ids.device)
        for j in range(token_ids.shape[1] - c.T):
            _, state = self.memory_hidden_states(token_ids[:, j : j + c.T], state)
        return state

    def window_targets(self, Y: Tensor, last_only: bool = False) -> tuple[Tensor, Tensor]:
        """Targets Y (B, T, N) -> tgt (B, N, T), the target of slot (x, t), and the mask of the slots trained on:
        not padding, and with last_only in slice T - 1 alone (S(T), the one the window cannot see)."""
        tgt = rearrange(Y, "b t x -> b x t")
        wanted = tgt != self.config.padding_idx
        if last_only:
            wanted[:, :, :-1] = False
        return tgt, wanted

    def window_loss(
        self,
        token_ids_full: Tensor,
        state: MemoryState | None,
        last_only: bool = False,
        previous: Tensor | None = None,
        recall_weight: float = 0.0,
    ) -> tuple[Tensor, Tensor, MemoryState]:
        """(B, T+1, N) window and the memory before it -> summed CE over S(1..T) (padding ignored; with
        last_only over S(T) alone), the number of targets, and the state after the window (still attached to the
        graph: truncation is the caller's).

        Beyond the seed, the recall term: with recall_weight > 0 and previous (B, N), the ids of a sentence
        written before this window (the trainer's recall_targets: the clip's state just before it, or the latest
        one the window does not show again; all padding where there is none), the
        last slice's slots read the incoming memory in every memory layer, and those reads, through the
        model's own readout, must spell previous slot by slot: recall_weight x that summed CE is added. It asks
        the memory to hold what was written in the readout's terms, which the window loss alone never does
        (docs/history.md, "The key does reach the answer; the readout does not use it")."""
        token_ids, Y = self.split_window(token_ids_full)
        reads: list[Tensor] | None = [] if recall_weight and previous is not None else None
        X_norm, state_out = self.memory_hidden_states(token_ids, state, reads)
        tgt, wanted = self.window_targets(Y, last_only)
        M = self.readout_matrix()  # (d, V)
        loss = F.cross_entropy(X_norm[wanted].flatten(-2) @ M, tgt[wanted], reduction="sum")
        if reads and previous is not None:
            known = previous != self.config.padding_idx  # (B, N)
            for r in reads:  # (B, N, d) each
                loss = loss + recall_weight * F.cross_entropy(r[known] @ M, previous[known], reduction="sum")
        return loss, wanted.sum(), state_out

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """nn.Module.load_state_dict, refusing by name memory weights for a model built without memory (and the
        reverse), instead of a list of unexpected keys."""
        has_memory = any(k.startswith(("memory.", "memory_taps.")) for k in state_dict)
        if has_memory and self.memory is None:
            raise ValueError(
                "the weights hold a tensor memory (memory.*, memory_taps.*) but this model was built without "
                "memory (config.memory is None); build it with the memory config that was saved beside them"
            )
        if strict and not has_memory and self.memory is not None:
            raise ValueError(
                "this model has a tensor memory (config.memory) but the weights hold none (memory.*)"
            )
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, token_ids: Tensor) -> Tensor:
        """token_ids (B, T, N) -> logits (B, N, T, V); slice t predicts sentence t + 1 of the window."""
        self._check_ids(token_ids, self.config.T, "T")
        if self.memory is not None:  # a window alone: the memory starts empty
            X_norm, _ = self.memory_hidden_states(token_ids, None)
            B, N, T, d_x, d_t = X_norm.shape
            return (X_norm.reshape(B * N * T, d_x * d_t) @ self.readout_matrix()).view(B, N, T, -1)
        X_norm = self.hidden_states(token_ids)
        B, N, T, d_x, d_t = X_norm.shape
        logits = X_norm.reshape(B * N * T, d_x * d_t) @ self.readout_matrix()  # (BNT, V)
        return logits.view(B, N, T, self.config.vocab_size)

    # --- training -------------------------------------------------------------------------------------------------
    def split_window(self, token_ids_full: Tensor) -> tuple[Tensor, Tensor]:
        """(B, T+1, N) -> input prefix S(0..T-1) (B, T, N) and shifted targets Y = S(1..T) (B, T, N)."""
        self._check_ids(token_ids_full, self.config.T + 1, "T+1")
        return token_ids_full[:, :-1, :], token_ids_full[:, 1:, :].contiguous()

    def training_step(self, token_ids_full: Tensor, last_only: bool = False) -> Tensor:
        """(B, T+1, N) -> teacher-forced window cross-entropy over S(1..T), padding ignored (selection loss);
        with last_only, over S(T) alone (beyond the paper: the slice the window cannot see).

        Equal to window_cross_entropy(self(prefix), Y): slots whose target is padding are ignored by that loss,
        so their logits are never formed (packed_hidden_states keeps every slot they could influence).
        """
        if self.memory is not None:  # a window alone: the memory starts empty
            loss_sum, count, _ = self.window_loss(token_ids_full, None, last_only)
            return loss_sum / count.clamp(min=1)
        token_ids, Y = self.split_window(token_ids_full)
        tgt, wanted = self.window_targets(Y, last_only)
        X_norm = self.packed_hidden_states(token_ids, wanted)  # (n, d_x, d_t)
        logits = X_norm.flatten(-2) @ self.readout_matrix()  # (n, V); M materialised first
        return F.cross_entropy(logits, tgt[wanted])  # mean over the non-padding targets

    # --- evaluation -----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, token_ids_full: Tensor) -> dict[str, float]:
        """score_memory with no memory carried in (a memory model sees each window alone)."""
        return self.score_memory(token_ids_full, None)[0]

    @torch.no_grad()
    def score_memory(
        self, token_ids_full: Tensor, state: MemoryState | None
    ) -> tuple[dict[str, float], MemoryState | None]:
        """Batch sums for evaluation; the caller adds them up over batches and divides.

        selection_loss_sum / selection_count: window CE over S(1..T). last_ce_sum / last_tokens: L_S(T) on the
        non-padding tokens of S(T); last_correct: argmax matches there. exact_sentences / sentences: decoded S(T)
        (cut at the first end id) equals gold S(T) cut the same way; without end ids only gold's content slots count.
        """
        c = self.config
        token_ids, Y = self.split_window(token_ids_full)
        tgt = rearrange(Y, "b t x -> b x t")  # (B, N, T)
        live_tgt = tgt != c.padding_idx
        wanted = live_tgt.clone()
        wanted[:, :, -1] = True  # every slot of the last slice is decoded
        if self.memory is not None:
            X_dense, state = self.memory_hidden_states(token_ids, state)
            X_norm = X_dense[wanted]  # (n, d_x, d_t) in the packed path's (b, x, t) order
        else:
            X_norm = self.packed_hidden_states(token_ids, wanted)  # (n, d_x, d_t)
        logits = X_norm.flatten(-2) @ self.readout_matrix()  # (n, V)
        row = torch.full(wanted.shape, -1, dtype=torch.long, device=wanted.device)
        row[wanted] = torch.arange(logits.shape[0], device=wanted.device)  # (B, N, T): slot -> packed row
        sel = F.cross_entropy(logits[row[live_tgt]], tgt[live_tgt], reduction="sum")
        last = logits[row[:, :, -1]]  # (B, N, V): the slice that predicts S(T)
        gold = token_ids_full[:, -1, :]  # (B, N)
        live = gold != c.padding_idx
        last_ce = F.cross_entropy(
            last.reshape(-1, c.vocab_size), gold.reshape(-1), ignore_index=c.padding_idx, reduction="sum"
        )
        correct = ((last.argmax(dim=-1) == gold) & live).sum()
        pred = self._decode(last)
        gold_cut = cut_at_end(gold, c.end_ids, c.padding_idx)
        if not c.end_ids:
            pred = pred.masked_fill(gold_cut == c.padding_idx, c.padding_idx)
        exact = (pred == gold_cut).all(dim=-1).sum()
        return {
            "selection_loss_sum": float(sel),
            "selection_count": float((Y != c.padding_idx).sum()),
            "last_ce_sum": float(last_ce),
            "last_tokens": float(live.sum()),
            "last_correct": float(correct),
            "exact_sentences": float(exact),
            "sentences": float(gold.shape[0]),
        }, state

    def _decode(self, last_logits: Tensor) -> Tensor:
        """(B, N, V) -> ids (B, N): argmax over non-padding ids, then the sentence cut at the first end id.

        The padding column is masked with the model's own (V,) buffer: no tensor is made from host data here, so
        the step can run inside a CUDA graph."""
        pad_column = self.input_construction.keep_rows == 0  # (V,) True at padding_idx
        ids = last_logits.masked_fill(pad_column, float("-inf")).argmax(-1)
        return cut_at_end(ids, self.config.end_ids, self.config.padding_idx)

    def last_slice_hidden_states(self, token_ids: Tensor) -> Tensor:
        """X_norm of the last sentence only, in fixed shapes: token_ids (B, T, N) -> (B, N, d_x, d_t).

        The same numbers as hidden_states(token_ids)[:, :, -1] (and as the packed path): every layer but the last
        runs densely; the last computes queries, residuals and the MLP for slice T-1 only. Unlike the packed path
        it never asks the host how many slots are live, so a rollout step stays on the device.
        """
        c = self.config
        if c.attention == "attentime":  # no last-slice Attentime path: the dense one
            return self.hidden_states(token_ids)[:, :, -1]
        key_mask = build_pad_mask(token_ids, c.padding_idx)  # (B, N, T)
        future = self.future_mask if c.slice_causal else None
        layers = cast(list[FourTensorLayer], list(self.layers))
        X = self.input_construction(token_ids)  # (B, N, T, d_x, d_t)
        for layer in layers[:-1]:
            X = layer(X, key_mask, future)
        return fiber_norm(self.final_norm, layers[-1].last_slice(X, key_mask))  # (B, N, d_x, d_t)

    @torch.no_grad()
    def next_logits(
        self, token_ids: Tensor, state: object | None = None, readout: Tensor | None = None
    ) -> tuple[Tensor, object | None]:
        """(B, T, N) window -> the logits (B, N, V) of the next state S(T), slot by slot, and the recurrent state.

        The numbers predict_next decodes (it is their argmax, cut at the first end id); a caller that wants
        another decoding (e.g. a grammar-constrained search, pipeline/projection.py) reads them here. `state` and
        `readout` as in predict_next.
        """
        self._check_ids(token_ids, self.config.T, "T")
        B, T, N = token_ids.shape
        M = readout if readout is not None else self.readout_matrix()  # (d, V)
        if self.memory is not None:
            X_dense, new_state = self.memory_hidden_states(token_ids, cast(MemoryState | None, state))
            return X_dense[:, :, -1].flatten(-2) @ M, new_state  # (B, N, V)
        with torch.inference_mode():
            wanted = torch.zeros(B, N, T, dtype=torch.bool, device=token_ids.device)
            wanted[:, :, -1] = True
            X_norm = self.packed_hidden_states(token_ids, wanted)  # (B*N, d_x, d_t) in (b, x) order
            logits = (X_norm.flatten(-2) @ M).view(B, N, self.config.vocab_size)
        return logits.clone(), state  # a normal tensor again

    @torch.no_grad()
    def decode_step(
        self, token_ids: Tensor, readout: Tensor, state: object | None = None
    ) -> tuple[Tensor, object | None]:
        """One rollout step: (B, T, N) window and the readout matrix M (d, V) that the caller materialised once
        for the whole rollout (paper 3.5.1) -> next state ids (B, N) and the recurrent state, like predict_next.

        Fixed shapes and no host synchronisation (no .item(), no nonzero()), so the step can be compiled with
        static shapes and replayed as a CUDA graph; the ids equal predict_next's.
        """
        self._check_ids(token_ids, self.config.T, "T")
        if self.memory is not None:
            X_dense, state = self.memory_hidden_states(token_ids, cast(MemoryState | None, state))
            X_last = X_dense[:, :, -1]  # (B, N, d_x, d_t)
        else:
            X_last = self.last_slice_hidden_states(token_ids)  # (B, N, d_x, d_t)
        return self._decode(X_last.flatten(-2) @ readout), state  # (B, N, V) -> (B, N)

    @torch.no_grad()
    def predict_next(
        self, token_ids: Tensor, state: object | None = None, readout: Tensor | None = None
    ) -> tuple[Tensor, object | None]:
        """(B, T, N) window -> next state S(T) ids (B, N), padded with padding_idx, and the recurrent state.

        Only the last slice of the logits is formed, on the slots that can reach it (packed_hidden_states); the
        ids equal those decoded from self(token_ids)[:, :, -1]. The window is embedded at positions 0..T-1 on
        every call (section 2.3), so a rollout slides it and calls again. Without memory `state` is carried
        unchanged; with memory it is the (h, c) before this window (None: empty) and the one returned has this
        window's slice 0 written, ready for the slid window. readout: M (d, V) materialised by the caller once
        for a whole rollout (None: materialised here). On CPU this packed path is the fastest at large batches;
        it asks the host how many slots are live, so a rollout on a GPU uses decode_step instead.
        """
        self._check_ids(token_ids, self.config.T, "T")
        B, T, N = token_ids.shape
        M = readout if readout is not None else self.readout_matrix()  # (d, V)
        if self.memory is not None:
            X_dense, new_state = self.memory_hidden_states(token_ids, cast(MemoryState | None, state))
            logits = X_dense[:, :, -1].flatten(-2) @ M  # (B, N, V)
            return self._decode(logits), new_state
        with torch.inference_mode():
            wanted = torch.zeros(B, N, T, dtype=torch.bool, device=token_ids.device)
            wanted[:, :, -1] = True
            X_norm = self.packed_hidden_states(token_ids, wanted)  # (B*N, d_x, d_t) in (b, x) order
            logits = (X_norm.flatten(-2) @ M).view(B, N, self.config.vocab_size)
            ids = self._decode(logits)
        return ids.clone(), state  # a normal tensor again, free to be edited by the caller


def count_parameters(config: FourTensorConfig) -> int:
    """Parameter count of a FourTensorModel built on the meta device (no memory allocated)."""
    with torch.device("meta"):
        model = FourTensorModel(config)
    return sum(p.numel() for p in model.parameters())
