"""Valid states by projection: a predicted state that does not parse under the weights' grammar is replaced by the
best-scoring state that does, searched over the predictor's per-slot log-probabilities.

The score of a candidate sentence w_0 .. w_{L-1} (its last word the end mark) is the sum over its slots of
log p_i(w_i), each slot's softmax taken over the vocabulary without padding, the same distribution whose argmax
the predictor decodes. Slots after the end mark are not scored (the predictor is never trained on them). A state
whose argmax decoding already parses is left as it is, so the projection only touches invalid predictions.

The search is a beam over slots 0..N-1; at slot i each hypothesis extends with the words the grammar allows next
that are among slot i's `top_k` most likely (all words if that leaves nothing to finish), and hypotheses that
could no longer be completed within the token limit are never formed. Only the built-in world's grammar
(world/grammar.py) is known today; a corpus without a grammar gets no projection (`projection_for` -> None).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import torch

from pipeline.tokenizer import PAD_ID, StateTokenizer

logger = logging.getLogger(__name__)

INF = math.inf


def argmax_state_ids(logits: torch.Tensor, end_ids: tuple[int, ...] = ()) -> torch.Tensor:
    """(B, N, V) -> (B, N): argmax over the non-padding ids, cut after the first end id (the predictor's rule)."""
    ids = logits.index_fill(-1, torch.tensor([PAD_ID], device=logits.device), float("-inf")).argmax(-1)
    if end_ids:
        is_end = torch.isin(ids, torch.tensor(end_ids, device=ids.device))  # (B, N)
        after = (is_end.cumsum(dim=-1) - is_end.long()) > 0  # strictly after the first end id
        ids = ids.masked_fill(after, PAD_ID)
    return ids


# ---- the world grammar as a left-to-right automaton ----------------------------------------------------------
@dataclass(frozen=True)
class _Prefix:
    """Where a left-to-right reading of a world state stands after some words.

    phase: "start" (nothing read), "empty" (after "empty"), "colour" / "shape" / "row" (inside an object item),
    "lamp" (after "lamp"), "item" (an item just closed), "comma" (after ","), "done" (after ".").
    stage: 0 objects may still come, 1 after the screen, 2 after the lamp (the canonical order).
    """

    phase: str = "start"
    length: int = 0  # words read so far
    stage: int = 0
    last_key: tuple[int, int] | None = None  # (colour, shape) index of the last object: identities increase
    cells: frozenset[tuple[int, int]] = frozenset()
    colour: int = -1  # the open object item's colour, shape and row
    shape: int = -1
    row: int = -1


class WorldAutomaton:
    """The world grammar's next-word rule: `step(prefix)` -> {word: next prefix} for every word that keeps the
    prefix completable into a valid state of at most `max_tokens` words (identity order, distinct cells, nothing
    in the screen's column when a screen stands, screen before lamp, each at most once)."""

    def __init__(self, max_tokens: int) -> None:
        from world import grammar

        self.g = grammar
        self.max_tokens = min(int(max_tokens), grammar.MAX_TOKENS)
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2 (the shortest state is 'empty .'), got {max_tokens}")

    # the fewest words that still have to follow a prefix before it is a whole state (INF: none completes it)
    def _rest(self, p: _Prefix) -> float:
        fixed = {"done": 0, "empty": 1, "start": 2, "colour": 4, "shape": 3, "row": 2, "lamp": 2, "item": 1}
        if p.phase in fixed:
            return fixed[p.phase]
        # after ",": the shortest item that may still come, then "."
        options = []
        if self._objects_possible(p):
            options.append(5)
        if self._screen_possible(p):
            options.append(2)
        if p.stage < 2:
            options.append(3)
        return min(options, default=INF)

    def _objects_possible(self, p: _Prefix) -> bool:
        n_ids = len(self.g.COLOURS) * len(self.g.SHAPES)
        return p.stage == 0 and (p.last_key is None or self._flat(p.last_key) < n_ids - 1)

    def _screen_possible(self, p: _Prefix) -> bool:
        return p.stage == 0 and all(c != self.g.SCREEN_COLUMN for _, c in p.cells)

    def _flat(self, key: tuple[int, int]) -> int:
        return key[0] * len(self.g.SHAPES) + key[1]

    def _fits(self, p: _Prefix) -> bool:
        return p.length + self._rest(p) <= self.max_tokens

    def step(self, p: _Prefix) -> dict[str, _Prefix]:
        g = self.g
        n = p.length + 1
        out: dict[str, _Prefix] = {}
        if p.phase in ("start", "comma"):
            if p.phase == "start":
                out["empty"] = replace(p, phase="empty", length=n)
            if self._objects_possible(p):
                for ci, colour in enumerate(g.COLOURS):
                    # a colour is open only if some shape of it comes after the last identity
                    if p.last_key is None or (ci, len(g.SHAPES) - 1) > p.last_key:
                        out[colour] = replace(p, phase="colour", length=n, colour=ci)
            if self._screen_possible(p):
                out["screen"] = replace(p, phase="item", length=n, stage=1)
            if p.stage < 2:
                out["lamp"] = replace(p, phase="lamp", length=n)
        elif p.phase == "colour":
            for si, shape in enumerate(g.SHAPES):
                if p.last_key is None or (p.colour, si) > p.last_key:
                    out[shape] = replace(p, phase="shape", length=n, shape=si)
        elif p.phase == "shape":
            for ri, row in enumerate(g.ROWS):
                if any((ri, c) not in p.cells for c in range(g.GRID)):
                    out[row] = replace(p, phase="row", length=n, row=ri)
        elif p.phase == "row":
            for ci, column in enumerate(g.COLUMNS):
                if (p.row, ci) not in p.cells:
                    out[column] = _Prefix("item", n, 0, (p.colour, p.shape), p.cells | {(p.row, ci)})
        elif p.phase == "lamp":
            out["on"] = out["off"] = replace(p, phase="item", length=n, stage=2)
        elif p.phase == "item":
            out[","] = replace(p, phase="comma", length=n)
            out["."] = replace(p, phase="done", length=n)
        elif p.phase == "empty":
            out["."] = replace(p, phase="done", length=n)
        return {w: q for w, q in out.items() if self._fits(q)}


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
        tokenizer: the predictor's tokenizer (ids <-> words).
        N: token slots per state (the predictor's N); states are at most min(N, the grammar's limit) words.
        end_ids: the ids that end a sentence in the predictor's argmax decoding (its config's end_ids).
        top_k: words considered per slot (>= 1).
        beam: hypotheses kept per slot (>= 1).
    """

    def __init__(self, tokenizer: StateTokenizer, N: int, end_ids: tuple[int, ...] = (), top_k: int = 5,
                 beam: int = 16) -> None:
        if not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        if not isinstance(beam, int) or beam < 1:
            raise ValueError(f"beam must be a positive integer, got {beam!r}")
        self.automaton = WorldAutomaton(N)
        self.tokenizer = tokenizer
        self.N, self.top_k, self.beam = int(N), top_k, beam
        self.end_ids = tuple(int(i) for i in end_ids)
        vocab = tokenizer.backend.get_vocab()
        self.word_id = {w: vocab[w] for w in self.automaton.g.VOCAB if w in vocab}
        missing = sorted(set(self.automaton.g.VOCAB) - set(self.word_id))
        if missing:
            logger.warning("projection: the tokenizer lacks world words %s; they are never proposed", missing)
        self.stats = ProjectionStats()

    def parses(self, ids: torch.Tensor) -> bool:
        """Whether one decoded row (N,) spells a valid state."""
        try:
            self.automaton.g.parse_state(self.tokenizer.spell(ids))
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
        beams: list[tuple[float, list[int], _Prefix]] = [(0.0, [], _Prefix())]
        done: tuple[float, list[int]] | None = None
        for i in range(self.N):
            allowed_ids = set(top[i])
            grown: list[tuple[float, list[int], _Prefix]] = []
            for score, words, prefix in beams:
                for word, nxt in self.automaton.step(prefix).items():
                    wid = self.word_id.get(word)
                    if wid is None or wid not in allowed_ids:
                        continue
                    s = score + table[i][wid]
                    if nxt.phase == "done":
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


def projection_for(grammar: str | None, tokenizer: StateTokenizer, N: int, end_ids: tuple[int, ...] = (),
                   top_k: int = 5, beam: int = 16) -> GrammarProjection | None:
    """The projection onto `grammar`'s valid states (None: a corpus without a grammar gets none)."""
    if grammar is None:
        return None
    if grammar != "world":
        raise ValueError(f"grammar: no projection is known for {grammar!r} (known: 'world')")
    return GrammarProjection(tokenizer, N, end_ids, top_k=top_k, beam=beam)
