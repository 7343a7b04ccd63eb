"""How far to trust what was read: a confidence per read state, the world grammar's verdict, one plain warning when
most of a clip is unsure, and the check of states a user wrote (before any model is loaded).

The shipped models know only the built-in world. On real footage the captioner still writes world sentences, so
each read state carries the captioner's mean log-probability per generated token (0 is certain) and, for weights
whose `model_index.json` says `"grammar": "world"`, whether it parses under the world grammar. A state is unsure
below the threshold (calibrated on world vs real frames by bench/caption_confidence.py) or when it does not
parse; a clip is never refused for it, only warned about.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.utils import UserError, canonical_state

# Mean token log-probability below which a read state is unsure: between the lowest world test frame and the
# highest real frame of the shipped captioner (bench/caption_confidence.py; the numbers are in docs/api.md).
DEFAULT_CONFIDENCE_THRESHOLD = -0.0025
GRAMMARS = ("world",)  # the grammars a weights folder may name in model_index.json

MOUNT_HINT = (
    "The shipped models only know the built-in world (coloured shapes on a 5x5 grid, a screen, a lamp); "
    "for real footage mount real weights: a weights folder with your own model_index.json, or "
    "--captioner/--predictor/--renderer DIR (a BLIP or GIT image-to-text checkpoint, a trained semworld "
    "predictor, a Stable Diffusion text-to-image checkpoint); see docs/api.md"
)


def check_grammar(name: object, where: str | Path = "model_index.json") -> str | None:
    if name is None:
        return None
    if name not in GRAMMARS:
        raise UserError(f"{where}: grammar must be one of {', '.join(GRAMMARS)}, got {name!r}")
    return str(name)


def parse_error(text: str, grammar: str = "world") -> str | None:
    """None when `text` is a valid state of `grammar`, else the parser's message (it names the word)."""
    from world.grammar import parse_state

    try:
        parse_state(canonical_state(text))
    except ValueError as err:
        return str(err)
    return None


def state_parses(text: str, grammar: str = "world") -> bool:
    return parse_error(text, grammar) is None


def unsure(confidence: float | None, parses: bool | None, threshold: float) -> bool:
    """A read state is unsure when it is below the threshold or does not parse (unknown counts as sure)."""
    return (confidence is not None and confidence < threshold) or parses is False


def clip_warning(
    confidences: Sequence[float | None], parses: Sequence[bool | None], threshold: float
) -> str | None:
    """The one warning for a clip most of whose read states are unsure, else None."""
    n = len(confidences)
    low = sum(unsure(c, p, threshold) for c, p in zip(confidences, parses, strict=True))
    if n == 0 or 2 * low <= n:
        return None
    return (
        f"{low} of {n} states read from this clip are unsure (confidence below {threshold:g} or outside the "
        f"world grammar): the reading and the forecast are probably meaningless. {MOUNT_HINT}."
    )


def check_written_states(
    states: Sequence[str],
    *,
    grammar: str | None,
    vocabulary: set[str] | None = None,
    max_tokens: int | None = None,
    label: str = "states",
) -> None:
    """Refuse states a user wrote that the models cannot read, naming the state and the word: under `grammar`
    the parser's message; otherwise a word outside `vocabulary`, or more than `max_tokens` tokens."""
    for i, text in enumerate(states):
        spelled = canonical_state(text)
        if grammar is not None:
            err = parse_error(spelled, grammar)
            if err is not None:
                raise UserError(f"{label}[{i}]: {err}")
            continue
        words = spelled.split()
        if vocabulary is not None and "[unk]" in text.lower():  # what a predictor writes for a word it lacks
            raise UserError(
                f"{label}[{i}]: {text!r} holds [UNK], the predictor's mark for a word outside its vocabulary "
                "(a forecast can contain it): replace it with a word"
            )
        if vocabulary is not None:
            unknown = [w for w in words if w not in vocabulary]
            if unknown:
                raise UserError(
                    f"{label}[{i}]: unknown word {unknown[0]!r} in {text!r} (not in the predictor's vocabulary)"
                )
        if max_tokens is not None and len(words) > max_tokens:
            raise UserError(
                f"{label}[{i}] has {len(words)} words and marks; the predictor reads at most {max_tokens} per "
                f"state: shorten {text!r}"
            )
