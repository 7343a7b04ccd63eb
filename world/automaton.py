"""The shapes world's grammar as a left-to-right automaton: which words may come next after a prefix of a state,
so that the prefix can still be completed into a valid state within a token limit. The projection onto valid
states (pipeline/projection.py) searches with it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from world import grammar

INF = math.inf


@dataclass(frozen=True)
class Prefix:
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
        self.g = grammar
        self.vocabulary = grammar.VOCAB
        self.max_tokens = min(int(max_tokens), grammar.MAX_TOKENS)
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2 (the shortest state is 'empty .'), got {max_tokens}")

    # the fewest words that still have to follow a prefix before it is a whole state (INF: none completes it)
    def _rest(self, p: Prefix) -> float:
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

    def _objects_possible(self, p: Prefix) -> bool:
        n_ids = len(self.g.COLOURS) * len(self.g.SHAPES)
        return p.stage == 0 and (p.last_key is None or self._flat(p.last_key) < n_ids - 1)

    def _screen_possible(self, p: Prefix) -> bool:
        return p.stage == 0 and all(c != self.g.SCREEN_COLUMN for _, c in p.cells)

    def _flat(self, key: tuple[int, int]) -> int:
        return key[0] * len(self.g.SHAPES) + key[1]

    def _fits(self, p: Prefix) -> bool:
        return p.length + self._rest(p) <= self.max_tokens

    def start(self) -> Prefix:
        return Prefix()

    def done(self, p: Prefix) -> bool:
        return p.phase == "done"

    def step(self, p: Prefix) -> dict[str, Prefix]:
        g = self.g
        n = p.length + 1
        out: dict[str, Prefix] = {}
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
                    out[column] = Prefix("item", n, 0, (p.colour, p.shape), p.cells | {(p.row, ci)})
        elif p.phase == "lamp":
            out["on"] = out["off"] = replace(p, phase="item", length=n, stage=2)
        elif p.phase == "item":
            out[","] = replace(p, phase="comma", length=n)
            out["."] = replace(p, phase="done", length=n)
        elif p.phase == "empty":
            out["."] = replace(p, phase="done", length=n)
        return {w: q for w, q in out.items() if self._fits(q)}
