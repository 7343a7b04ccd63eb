"""How far to trust what was read: a confidence per read state, the domain's verdict, one plain warning when most
of a clip is unsure, and the check of states a user wrote (before any model is loaded).

A captioner writes a sentence for any frame, also for footage unlike anything it was trained on. So each read state
carries the captioner's mean log-probability per generated token (0 is certain) and, in a domain with a grammar,
whether it parses. A state is unsure below the confidence threshold (the weights' own, else the domain's; none:
the confidence alone never makes a state unsure) or when it does not parse; a clip is never refused for it, only
warned about, in the domain's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import zip_longest

from pipeline.domain import Domain, parse_error
from pipeline.utils import UserError, canonical_state


def unsure(confidence: float | None, parses: bool | None, threshold: float | None) -> bool:
    """A read state is unsure when it is below the threshold or does not parse (unknown counts as sure)."""
    low = threshold is not None and confidence is not None and confidence < threshold
    return low or parses is False


def unsure_flags(
    confidences: Sequence[float | None], parses: Sequence[bool | None], threshold: float | None, n: int = 0
) -> list[bool]:
    """Per read state, whether it is unsure (`unsure`); states past the end of either list count as sure, and the
    list is padded to `n` states (e.g. states given in words, which carry neither)."""
    flags = [unsure(c, p, threshold) for c, p in zip_longest(confidences, parses)]
    return flags + [False] * (n - len(flags))


def clip_warning(
    confidences: Sequence[float | None],
    parses: Sequence[bool | None],
    threshold: float | None,
    domain: Domain,
) -> str | None:
    """The one warning for a clip most of whose read states are unsure, else None."""
    n = len(confidences)
    low = sum(unsure_flags(confidences, parses, threshold))
    if n == 0 or 2 * low <= n:
        return None
    why = [f"confidence below {threshold:g}" if threshold is not None else "",
           f"outside the {domain.name} domain's grammar" if any(p is False for p in parses) else ""]  # fmt: skip
    because = " or ".join(w for w in why if w)
    return (
        f"{low} of {n} states read from this clip are unsure ({because}): the reading and the forecast are "
        f"probably meaningless. {domain.unsure_hint}."
    )


def check_written_states(
    states: Sequence[str],
    *,
    domain: Domain | None,
    vocabulary: set[str] | None = None,
    max_tokens: int | None = None,
    label: str = "states",
) -> None:
    """Refuse states a user wrote that the models cannot read, naming the state and the word: the domain's
    parser's message when it has a grammar; otherwise a word outside `vocabulary`, or more than `max_tokens`
    tokens (the predictor's; the spelling is its tokenizer's: lowercase, punctuation marks apart)."""
    for i, text in enumerate(states):
        if domain is not None:
            err = parse_error(domain, text)
            if err is not None:
                raise UserError(f"{label}[{i}]: {err}")
        words = canonical_state(text).split()
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
