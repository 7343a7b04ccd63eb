"""Valid states by projection: a predicted state that does not parse under the weights' domain is replaced by the
best-scoring state that does, searched over the predictor's per-slot log-probabilities.

The score of a candidate sentence w_0 .. w_{L-1} (its last word the end mark) is the sum over its slots of
log p_i(w_i), each slot's softmax taken over the vocabulary without padding, the same distribution whose argmax
the predictor decodes. Slots after the end mark are not scored (the predictor is never trained on them). A state
whose argmax decoding already parses is left as it is, so the projection only touches invalid predictions.

The search is a beam over slots 0..N-1; at slot i each hypothesis extends with the words the grammar allows next
that are among slot i's `top_k` most likely (all words if that leaves nothing to finish), and hypotheses that
could no longer be completed within the token limit are never formed. The domain gives the automaton of its valid
states (`Domain.automaton`); a domain without one gets no projection (`projection_for` -> None).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from pipeline.domain import Domain, StateAutomaton
from pipeline.tokenizer import PAD_ID, StateTokenizer

logger = logging.getLogger(__name__)


def argmax_state_ids(logits: torch.Tensor, end_ids: tuple[int, ...] = ()) -> torch.Tensor:
    """(B, N, V) -> (B, N): argmax over the non-padding ids, cut after the first end id (the predictor's rule)."""
    ids = logits.index_fill(-1, torch.tensor([PAD_ID], device=logits.device), float("-inf")).argmax(-1)
    if end_ids:
        is_end = torch.isin(ids, torch.tensor(end_ids, device=ids.device))  # (B, N)
        after = (is_end.cumsum(dim=-1) - is_end.long()) > 0  # strictly after the first end id
        ids = ids.masked_fill(after, PAD_ID)
    return ids


# ---- the projection ----------------------------------------------------------------------------------------
@dataclass
class ProjectionStats:
    """How many states a projection saw and how many it changed (their argmax decoding did not parse)."""

    states: int = 0
    projected: int = 0


class GrammarProjection:
    """Per-slot logits (B, N, V) -> ids (B, N) of valid states (padded with PAD_ID): the argmax decoding where it
    parses, else the best-scoring valid state the beam finds.

    Args:
        domain: the domain whose valid states are the target (its `parse` and `automaton`).
        tokenizer: the predictor's tokenizer (ids <-> words).
        N: token slots per state (the predictor's N); states are at most min(N, the domain's limit) words.
        end_ids: the ids that end a sentence in the predictor's argmax decoding (its config's end_ids).
        top_k: words considered per slot (>= 1).
        beam: hypotheses kept per slot (>= 1).
    """

    def __init__(
        self,
        domain: Domain,
        tokenizer: StateTokenizer,
        N: int,
        end_ids: tuple[int, ...] = (),
        top_k: int = 5,
        beam: int = 16,
    ) -> None:
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        if not isinstance(beam, int) or beam < 1:
            raise ValueError(f"beam must be a positive integer, got {beam!r}")
        automaton = domain.automaton(N)
        if automaton is None:
            raise ValueError(
                f"domain {domain.name!r} has no automaton of its valid states: nothing to project onto"
            )
        self.domain = domain
        self.automaton: StateAutomaton = automaton
        self.tokenizer = tokenizer
        self.N, self.top_k, self.beam = int(N), top_k, beam
        self.end_ids = tuple(int(i) for i in end_ids)
        vocab = tokenizer.backend.get_vocab()
        self.word_id = {w: vocab[w] for w in self.automaton.vocabulary if w in vocab}
        missing = sorted(set(self.automaton.vocabulary) - set(self.word_id))
        if missing:
            logger.debug("projection: the tokenizer lacks %s words %s; they are never proposed", domain.name,
                           missing)  # fmt: skip
        self.stats = ProjectionStats()

    def parses(self, ids: torch.Tensor) -> bool:
        """Whether one decoded row (N,) spells a valid state."""
        try:
            self.domain.parse(self.tokenizer.spell(ids))
        except ValueError:
            return False
        return True

    def argmax_ids(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, N, V) -> (B, N): the predictor's own decoding (`argmax_state_ids`)."""
        return argmax_state_ids(logits, self.end_ids)

    @torch.no_grad()
    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (B, N, V) -> ids (B, N) on the logits' device."""
        if logits.dim() != 3 or logits.shape[1] != self.N:
            raise ValueError(f"logits: expected (B, N={self.N}, V), got {tuple(logits.shape)}")
        ids = self.argmax_ids(logits)  # (B, N)
        bad = [b for b in range(ids.shape[0]) if not self.parses(ids[b])]
        self.stats.states += ids.shape[0]
        self.stats.projected += len(bad)
        if bad:
            masked = logits[bad].float().cpu().index_fill(-1, torch.tensor([PAD_ID]), float("-inf"))
            logp = torch.log_softmax(masked, dim=-1)  # (b, N, V)
            for row, b in enumerate(bad):
                ids[b] = self.search(logp[row]).to(ids.device)
        return ids

    def search(self, logp: torch.Tensor) -> torch.Tensor:
        """One state's log-probabilities (N, V) -> ids (N,) of the best valid state found (top_k, then every
        word if the top_k words leave no valid state)."""
        best = self._beam(logp, self.top_k)
        if best is None:
            best = self._beam(logp, logp.shape[-1])
        assert best is not None, "the automaton only forms completable prefixes"
        out = torch.full((self.N,), PAD_ID, dtype=torch.long)
        out[: len(best)] = torch.tensor(best, dtype=torch.long)
        return out

    def _beam(self, logp: torch.Tensor, k: int) -> list[int] | None:
        top = logp.topk(min(k, logp.shape[-1]), dim=-1).indices.tolist()  # (N, k)
        table = logp.tolist()  # (N, V) python floats: the search is scalar work
        beams: list[tuple[float, list[int], Any]] = [(0.0, [], self.automaton.start())]
        done: tuple[float, list[int]] | None = None
        for i in range(self.N):
            allowed_ids = set(top[i])
            grown: list[tuple[float, list[int], Any]] = []
            for score, words, prefix in beams:
                for word, nxt in self.automaton.step(prefix).items():
                    wid = self.word_id.get(word)
                    if wid is None or wid not in allowed_ids:
                        continue
                    s = score + table[i][wid]
                    if self.automaton.done(nxt):
                        if done is None or s > done[0]:
                            done = (s, [*words, wid])
                    else:
                        grown.append((s, [*words, wid], nxt))
            grown.sort(key=lambda h: h[0], reverse=True)
            # scores only fall as words are added: a finished state above every open one is final
            beams = [h for h in grown[: self.beam] if done is None or h[0] > done[0]]
            if not beams:
                break
        return None if done is None else done[1]


def projection_for(
    domain: Domain, tokenizer: StateTokenizer, N: int, end_ids: tuple[int, ...] = (), **search: int
) -> GrammarProjection | None:
    """The projection onto `domain`'s valid states (None: a domain without an automaton gets none); `search` is
    GrammarProjection's top_k and beam."""
    if domain.automaton(N) is None:
        return None
    return GrammarProjection(domain, tokenizer, N, end_ids, **search)
