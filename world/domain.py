"""The built-in world as a semworld domain ("shapes"): coloured shapes on a 5 x 5 grid, a screen and a lamp.

`ShapesDomain` gives the inference path everything it knows of this world (pipeline/domain.py has the interface):
the grammar of world/grammar.py, the timeline object by object, the automaton of valid states, the left-right
mirror, a few seeded sample clips and the ground-truth frame of a state. It imports nothing of semworld's
pipeline: the interface is a structural protocol.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from world import grammar
from world.automaton import WorldAutomaton
from world.render import render_state
from world.scenarios import FPS, STRIDE, episode

# Mean captioner log-probability per token below which a read state is unsure: between the lowest world test
# frame and the highest real frame of the embedded captioner (bench/caption_confidence.py; docs/api.md).
CONFIDENCE_THRESHOLD = -0.0025
SAMPLE_SCENARIOS = ("bounce", "gravity", "collide")


class SampleClip(NamedTuple):
    """pipeline.domain.GroundTruthClip's fields (world imports nothing of the pipeline): the video frames
    (F, H, W, 3) uint8 at `fps`, and the true state at every `stride`-th frame."""

    name: str
    frames: np.ndarray
    fps: float
    states: list[str]
    stride: int


@functools.cache
def _splitter() -> Any:  # tokenizers.pre_tokenizers.PreTokenizer
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )


class ShapesDomain:
    """The built-in world's states: "red ball top left , blue box bottom right , lamp on ." (world/grammar.py)."""

    name = "shapes"
    description = "the built-in 2-D world: coloured shapes on a 5x5 grid, a screen, a lamp"
    actions: tuple[str, ...] = ()
    vocabulary: frozenset[str] | None = frozenset(grammar.VOCAB)
    max_tokens: int | None = grammar.MAX_TOKENS
    mirror: Mapping[str, str] | None = grammar.MIRROR
    confidence_threshold: float | None = CONFIDENCE_THRESHOLD
    caption_tokens: int | None = grammar.MAX_TOKENS + 8  # headroom lets a captioner finish a sentence
    unsure_hint = (
        "The shipped models only know the built-in world (coloured shapes on a 5x5 grid, a screen, a lamp); "
        "for real footage mount real weights: a weights folder with your own model_index.json, or "
        "--captioner/--predictor/--renderer DIR (a BLIP or GIT image-to-text checkpoint, a trained semworld "
        "predictor, a Stable Diffusion text-to-image checkpoint); see docs/domains.md"
    )

    def spell(self, text: str) -> str:
        """Lowercase words and punctuation marks joined by single spaces ("Red ball top left, lamp on." ->
        "red ball top left , lamp on ."), the split the predictor's word-level tokenizer makes."""
        return " ".join(word for word, _ in _splitter().pre_tokenize_str(text.lower()))

    def parse(self, text: str) -> dict[str, Any] | None:
        scene = grammar.parse_state(self.spell(text))
        return {
            "objects": [
                {
                    "colour": o.colour,
                    "shape": o.shape,
                    "row": grammar.ROWS[o.row],
                    "column": grammar.COLUMNS[o.col],
                }
                for o in scene.objects
            ],
            "screen": scene.screen,
            "lamp": scene.lamp,
        }

    def changes(self, previous: str, current: str) -> list[str]:
        """Object by object ("red ball moved from top left to upper left", "lamp switched off"); a state that
        does not parse is only said to have changed."""
        if self.spell(previous) == self.spell(current):
            return []
        try:
            before, after = (
                grammar.parse_state(self.spell(previous)),
                grammar.parse_state(self.spell(current)),
            )
        except ValueError:
            return ["changed (not a world state)"]
        out: list[str] = []
        old = {o.identity: o for o in before.objects}
        new = {o.identity: o for o in after.objects}
        for ident, obj in new.items():
            name = " ".join(ident)
            if ident not in old:
                out.append(f"{name} appeared at {_where(obj)}")
            elif (old[ident].row, old[ident].col) != (obj.row, obj.col):
                out.append(f"{name} moved from {_where(old[ident])} to {_where(obj)}")
        out += [
            f"{' '.join(ident)} vanished from {_where(obj)}" for ident, obj in old.items() if ident not in new
        ]
        if before.screen != after.screen:
            out.append("screen appeared" if after.screen else "screen removed")
        if before.lamp != after.lamp:
            if after.lamp is None:
                out.append("lamp gone")
            elif before.lamp is None:
                out.append(f"lamp appeared, {'on' if after.lamp else 'off'}")
            else:
                out.append(f"lamp switched {'on' if after.lamp else 'off'}")
        return out

    def automaton(self, max_tokens: int) -> WorldAutomaton | None:
        return WorldAutomaton(max_tokens)

    def sample_clips(self, seed: int = 0) -> list[SampleClip]:
        """One test-split clip per sample scenario, named "world-<scenario>", at 128 px."""
        out = []
        for scenario in SAMPLE_SCENARIOS:
            ep = episode(scenario, seed, 0, split="test")
            out.append(SampleClip(f"world-{scenario}", ep.frames(STRIDE, 128), float(FPS), ep.states, STRIDE))
        return out

    def draw(self, state: str, size: int) -> np.ndarray | None:
        return render_state(self.spell(state), size=size)

    def generate(self, out: str | Path, *, scenario: str = "all", **options: Any) -> Path:
        """Record a data set (`semworld world generate`): `world.video.generate` (its options: clips, seed, split,
        length, size, workers, progress) over `scenario`, names, a family or "all" (world/scenarios.py)."""
        from world.video import generate

        return generate(out, scenario, **options)


def _where(obj: grammar.WorldObject) -> str:
    return f"{grammar.ROWS[obj.row]} {grammar.COLUMNS[obj.col]}"
