"""The free-text domain: states are whatever a captioner writes, with no grammar.

It is the domain of weights whose `model_index.json` names none, e.g. a user's own BLIP or GIT captioner, a
predictor trained on its captions and a Stable Diffusion renderer. Nothing is parsed or projected; a state is
spelled as written (white space collapsed); the timeline says which words changed; a read state is unsure only
below a confidence threshold the weights themselves carry.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.domain import GroundTruthClip, StateAutomaton
from pipeline.utils import canonical_state

MAX_PHRASES = 4  # changes listed per step before the rest is summed up


class FreeTextDomain:
    """Open-vocabulary states: no parse, no projection, a word-level timeline."""

    name = "text"
    description = "free text: states are whatever the captioner writes (no grammar)"
    actions: tuple[str, ...] = ()
    vocabulary: frozenset[str] | None = None
    max_tokens: int | None = None
    mirror: Mapping[str, str] | None = None
    confidence_threshold: float | None = None
    caption_tokens: int | None = None
    unsure_hint = (
        "the captioner is unsure of most of this clip: it was probably not trained on footage like this "
        "(docs/domains.md says how to bring weights for your own domain)"
    )

    def spell(self, text: str) -> str:
        return " ".join(text.split())

    def parse(self, text: str) -> dict[str, Any] | None:
        return None

    def changes(self, previous: str, current: str) -> list[str]:
        """Which words changed, in order: "walks -> runs", "added: a red car", "removed: slowly" (compared as the
        predictor's tokenizer reads them: lowercase, punctuation apart)."""
        before, after = canonical_state(previous).split(), canonical_state(current).split()
        if before == after:
            return []
        out: list[str] = []
        matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
        for op, i0, i1, j0, j1 in matcher.get_opcodes():
            old, new = " ".join(before[i0:i1]), " ".join(after[j0:j1])
            if op == "replace":
                out.append(f"{old} -> {new}")
            elif op == "insert":
                out.append(f"added: {new}")
            elif op == "delete":
                out.append(f"removed: {old}")
        if len(out) > MAX_PHRASES:
            out = [*out[:MAX_PHRASES], f"and {len(out) - MAX_PHRASES} more changes"]
        return out

    def automaton(self, max_tokens: int) -> StateAutomaton | None:
        return None

    def sample_clips(self, seed: int = 0) -> Sequence[GroundTruthClip]:
        return []

    def draw(self, state: str, size: int) -> np.ndarray | None:
        return None
