"""Stand-ins shared across the tests: a toy domain and stages that need no weights."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class ToyDomain:
    """A domain of two states, "up" and "down"; a change between them is a "flip"."""

    name = "toy"
    description = "a switch that is up or down"
    actions: tuple[str, ...] = ()
    vocabulary: frozenset[str] | None = frozenset({"up", "down"})
    max_tokens: int | None = 1
    mirror: Mapping[str, str] | None = {"up": "down", "down": "up"}
    confidence_threshold: float | None = None
    caption_tokens: int | None = 4
    unsure_hint = "the switch is hard to see"

    def spell(self, text: str) -> str:
        return text.strip().lower()

    def parse(self, text: str) -> dict[str, Any] | None:
        if self.spell(text) not in ("up", "down"):
            raise ValueError(f"{text!r} is not up or down")
        return {"position": self.spell(text)}

    def changes(self, previous: str, current: str) -> list[str]:
        return [] if self.spell(previous) == self.spell(current) else ["flip"]

    def automaton(self, max_tokens: int) -> None:
        return None

    def sample_clips(self, seed: int = 0) -> list:
        return []

    def draw(self, state: str, size: int) -> np.ndarray | None:
        return np.full((size, size, 3), 255 if self.spell(state) == "up" else 0, dtype=np.uint8)


class FlipStages:
    """All three stages of the toy world: a frame's brightness is its state, each step flips the switch, and a
    state is drawn white (up) or black (down)."""

    default_steps = 1

    def caption(self, frames: Sequence[np.ndarray]) -> list[str]:
        return ["up" if f.mean() > 127 else "down" for f in frames]

    def predict(self, histories: Sequence[Sequence[str]], k: int, truncate: bool = False) -> list[list[str]]:
        out = []
        for h in histories:
            last, states = h[-1], []
            for _ in range(k):
                last = "down" if last == "up" else "up"
                states.append(last)
            out.append(states)
        return out

    def render(self, states: Sequence[str], **kwargs: Any) -> list[np.ndarray]:
        return [ToyDomain().draw(s, 32) for s in states]  # type: ignore[misc]


def make_flip_stage(folder: Any, device: Any = None, dtype: Any = None, domain: Any = None) -> FlipStages:
    """A plug-in stage factory, as model_index.json names one: `["tests.fakes", "make_flip_stage"]`."""
    return FlipStages()
