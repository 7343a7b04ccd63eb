"""Mirror averaging: the predictor reads each history twice, as it is and mirrored, and forecasts from the mean of
the two views' per-slot log-probabilities.

A domain may name a word swap that leaves its laws unchanged (`Domain.mirror`; the built-in shapes world swaps
its column words: a left-right mirror, with each word keeping its slot because the caption orders objects by
identity). A mirrored history is then another valid history, and the mirror of its next state is the next state
of the original. Averaging the two views is test-time augmentation: two forecasts that share the weights but err
differently. The model runs on a batch twice as large (`docs/predictor_world.md` has what it costs and gains). A
domain without a mirror gets none (`mirror_for` -> None).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pipeline.domain import Domain
from pipeline.projection import argmax_state_ids
from pipeline.tokenizer import StateTokenizer


def mirror_permutation(tokenizer: StateTokenizer, swap: dict[str, str]) -> Tensor:
    """The id permutation (V,) of a word swap: perm[v] is the id of v's mirror word (itself when it has none)."""
    vocab = tokenizer.backend.get_vocab()  # word -> id
    words = {i: w for w, i in vocab.items()}
    perm = torch.arange(len(words))
    for i, word in words.items():
        mirror = swap.get(word)
        if mirror is not None and mirror in vocab:
            perm[i] = vocab[mirror]
    if not torch.equal(perm[perm], torch.arange(len(words))):
        raise ValueError("a mirror must undo itself: the swap maps two words onto one")
    return perm


class MirrorAveraged(nn.Module):
    """A predictor model that forecasts from the mean log-probabilities of a history and its mirror.

    It wraps a model with `next_logits` (and `stream_memory` when it has a tensor memory); the recurrent state it
    hands back covers both views (2B rows: the B histories, then their mirrors), so a rollout that threads the
    state through (pipeline.predictor.Predictor) keeps both views' memories.
    """

    def __init__(self, model: nn.Module, perm: Tensor) -> None:
        super().__init__()
        if not hasattr(model, "next_logits"):
            raise ValueError(f"mirror averaging: {type(model).__name__} has no next_logits")
        self.inner = model
        self.perm: Tensor
        self.register_buffer("perm", perm.long(), persistent=False)  # (V,)

    @property
    def config(self) -> Any:
        return self.inner.config

    @property
    def memory(self) -> Any:
        """The wrapped model's tensor memory (None without one): Predictor streams histories through it."""
        return getattr(self.inner, "memory", None)

    def both(self, token_ids: Tensor) -> Tensor:
        """(B, ..., N) ids -> (2B, ..., N): the rows, then the same rows mirrored."""
        return torch.cat([token_ids, self.perm[token_ids]], dim=0)

    def readout_matrix(self) -> Tensor:
        return self.inner.readout_matrix()  # type: ignore[operator,no-any-return]

    def stream_memory(self, token_ids: Tensor, state: Any = None) -> Any:
        """A history (B, L, N) -> the memory of both views (2B rows)."""
        return self.inner.stream_memory(self.both(token_ids), state)  # type: ignore[operator]

    def next_logits(
        self, token_ids: Tensor, state: object | None = None, readout: Tensor | None = None
    ) -> tuple[Tensor, object | None]:
        """(B, T, N) window -> the mean log-probabilities (B, N, V) of the two views, and both views' state."""
        B = token_ids.shape[0]
        if readout is None:
            logits, state = self.inner.next_logits(self.both(token_ids), state)  # type: ignore[operator]
        else:
            logits, state = self.inner.next_logits(self.both(token_ids), state, readout=readout)  # type: ignore[operator]
        logp = torch.log_softmax(logits.float(), dim=-1)  # (2B, N, V)
        # The mirrored view's probability of word v is its probability of mirror(v) read back: index by perm.
        return (logp[:B] + logp[B:][..., self.perm]) / 2, state

    def predict_next(
        self, token_ids: Tensor, state: object | None = None, readout: Tensor | None = None
    ) -> tuple[Tensor, object | None]:
        """(B, T, N) window -> the argmax ids (B, N) of the averaged log-probabilities, cut after the first end id."""
        logp, state = self.next_logits(token_ids, state, readout)
        return argmax_state_ids(logp, tuple(self.config.end_ids)), state  # (B, N)


def mirror_for(domain: Domain, tokenizer: StateTokenizer) -> Tensor | None:
    """The id permutation of `domain`'s mirror (None: a domain without a known symmetry)."""
    if not domain.mirror:
        return None
    return mirror_permutation(tokenizer, dict(domain.mirror))
