"""Domains: what the states of one kind of world look like, behind one small interface.

A *domain* is everything the inference path needs to know about the language its states are written in: how a
state is spelled, whether (and how) it parses into named fields, which words and how many tokens a state may
have, what changed between two states (the timeline), and, where the domain has them, the automaton of its valid
states (projection), a word swap its laws are unchanged by (mirror averaging), the actions an agent can take,
seeded clips with ground-truth states and a ground-truth frame drawer. Like a diffusers scheduler, a domain is
handed to the pipeline and its stages; no inference module imports one by name.

Domains are looked up by name in one registry (`get_domain`). The names come from three places: the built-in
table below (resolved lazily, so this module imports no domain package), `register_domain` at run time, and the
`semworld.domains` entry-point group of installed packages. A weights folder names its domain in
`model_index.json` (`"domain": "shapes"`; the older `"grammar": "world"` means the same); weights that name none
get the free-text domain.

    domain = get_domain("text")
    domain.spell("A man  walks.")              # -> "A man walks."
    domain.changes("a man walks .", "a man runs .")   # -> ["walks -> runs"]
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from pipeline.utils import UserError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "semworld.domains"
DEFAULT_DOMAIN = "text"  # for weights whose model_index.json names no domain

# name -> "module:attribute" of a zero-argument factory (a class or a function returning a Domain).
_BUILTIN: dict[str, str] = {
    "shapes": "world.domain:ShapesDomain",
    "text": "pipeline.domains.text:FreeTextDomain",
    "pong": "pipeline.domains.atari.domain:PongDomain",
    "freeway": "pipeline.domains.atari.domain:FreewayDomain",
}
# Older names that still load: model_index.json's "grammar": "world" is the built-in shapes world.
ALIASES: dict[str, str] = {"world": "shapes"}

_registered: dict[str, Callable[[], Domain]] = {}
_instances: dict[str, Domain] = {}


class GroundTruthClip(NamedTuple):
    """A seeded clip of a domain that can make them: its video frames (F, H, W, 3) uint8 at `fps`, and the true
    state at every `stride`-th frame (frames 0, stride, 2 * stride, ...)."""

    name: str
    frames: np.ndarray
    fps: float
    states: list[str]
    stride: int


@runtime_checkable
class StateAutomaton(Protocol):
    """A left-to-right reading of a domain's valid states, for the projection (pipeline.projection).

    A prefix is opaque to the caller: `start()` is the empty one, `step(prefix)` maps every word that keeps the
    prefix completable (within the automaton's token limit) to the prefix after it, and `done(prefix)` says
    whether the prefix is a whole state."""

    vocabulary: tuple[str, ...]

    def start(self) -> Any: ...

    def step(self, prefix: Any) -> dict[str, Any]: ...

    def done(self, prefix: Any) -> bool: ...


@runtime_checkable
class Domain(Protocol):
    """What a domain gives the inference path. Attributes that a domain lacks are None or empty.

    Attributes:
        name: the registry name (model_index.json's "domain").
        description: one line on what the states describe (shown in warnings and `semworld domains`).
        actions: the words of the actions an agent can take, () for a domain without actions.
        vocabulary: the words (and marks) a state may use, None for an open vocabulary.
        max_tokens: the most word-level tokens of one state, None when the domain sets no limit.
        mirror: a word swap that leaves the domain's laws unchanged (mirror averaging), or None.
        confidence_threshold: mean captioner log-probability per token below which a read state is unsure, for
            weights of this domain that carry none of their own (None: only the weights' own threshold counts).
        caption_tokens: new tokens a captioner may generate for one state (None: the checkpoint's own setting).
        unsure_hint: what to tell a user when most of a clip is unsure (what the models know, what to do).
    """

    name: str
    description: str
    actions: tuple[str, ...]
    vocabulary: frozenset[str] | None
    max_tokens: int | None
    mirror: Mapping[str, str] | None
    confidence_threshold: float | None
    caption_tokens: int | None
    unsure_hint: str

    def spell(self, text: str) -> str:
        """The canonical spelling of a state, so that equal states compare equal as strings."""
        ...

    def parse(self, text: str) -> dict[str, Any] | None:
        """A state's named fields; raise ValueError naming the offending word when it is not a valid state; None
        when the domain has no grammar (every text is a state)."""
        ...

    def changes(self, previous: str, current: str) -> list[str]:
        """What changed from `previous` to `current`, one short phrase per change ([] when nothing did)."""
        ...

    def automaton(self, max_tokens: int) -> StateAutomaton | None:
        """The valid states of at most `max_tokens` tokens as an automaton (None: no projection)."""
        ...

    def sample_clips(self, seed: int = 0) -> Sequence[GroundTruthClip]:
        """A few seeded clips with their true states, for demos and the web page ([] when the domain has none)."""
        ...

    def draw(self, state: str, size: int) -> np.ndarray | None:
        """The true frame (size, size, 3) uint8 of a state, or None when the domain cannot draw one."""
        ...


# Optional, for domains that can record data sets (`semworld world generate --domain NAME`):
#     def generate(self, out, *, clips, seed, split, length, size, workers, progress, **options) -> Path
# writes clips, frames and states.jsonl into `out` and returns the path of states.jsonl.
# Optional, for planning (pipeline.goals, `semworld plan`): `fields`, the flat names of parse's fields ("ball x",
# "score player"), which goals may compare; `goals`, the named goals (str -> pipeline.goals.GoalPredicate).
def can_generate(domain: Domain) -> bool:
    """Whether `domain` records data sets (has the optional `generate`)."""
    return callable(getattr(domain, "generate", None))


def register_domain(name: str, factory: Callable[[], Domain]) -> None:
    """Make `name` resolve to `factory()` (a class or a function) from now on, in this process."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"domain name must be a word (letters, digits, - and _), got {name!r}")
    _registered[name] = factory
    _instances.pop(name, None)


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_domains() -> list[str]:
    """Every name `get_domain` resolves (aliases not included), sorted."""
    return sorted(set(_BUILTIN) | set(_registered) | set(_entry_points()))


def _load(target: str) -> Callable[[], Domain]:
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
    except ImportError as err:  # a package missing from this installation: one line, not a traceback
        raise UserError(
            f"domain {target}: cannot be imported ({err}); reinstall semworld (pip install -e .)"
        ) from None


def get_domain(name: str | Domain | None = None) -> Domain:
    """The domain called `name` (None: the free-text default; a Domain is returned as it is). One instance per
    name per process. A name nobody registered is a UserError listing the known ones."""
    if name is None:
        name = DEFAULT_DOMAIN
    if not isinstance(name, str):
        if not isinstance(name, Domain):
            raise TypeError(f"domain: expected a name or a Domain, got {type(name).__name__}")
        return name
    key = ALIASES.get(name, name)
    if key in _instances:
        return _instances[key]
    factory: Callable[[], Domain]
    if key in _registered:
        factory = _registered[key]
    elif key in _BUILTIN:
        factory = _load(_BUILTIN[key])
    else:
        eps = _entry_points()
        if key not in eps:
            raise UserError(f"unknown domain {name!r} (known: {', '.join(known_domains())})")
        factory = eps[key].load()
    domain = factory()
    if not isinstance(domain, Domain):
        raise TypeError(
            f"domain {name!r}: {factory!r} did not make a Domain (missing members of the protocol)"
        )
    _instances[key] = domain
    return domain


def domain_of_index(index: Mapping[str, Any], where: str | Path = "model_index.json") -> Domain:
    """The domain a weights folder's index names: `"domain"`, else the older `"grammar"`, else free text."""
    name = index.get("domain", index.get("grammar"))
    if name is not None and not isinstance(name, str):
        raise UserError(f"{where}: domain must be a name (known: {', '.join(known_domains())}), got {name!r}")
    try:
        return get_domain(name)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None


def parses(domain: Domain, text: str) -> bool | None:
    """Whether `text` is a valid state of `domain` (None: the domain has no grammar)."""
    try:
        return None if domain.parse(text) is None else True
    except ValueError:
        return False


def parse_error(domain: Domain, text: str) -> str | None:
    """None when `text` is a valid state of `domain` (or the domain has no grammar), else the parser's message."""
    try:
        domain.parse(text)
    except ValueError as err:
        return str(err)
    return None


def timeline(domain: Domain, states: Sequence[str]) -> list[list[str]]:
    """Per step, what changed since the step before, in the domain's words (the first step: [])."""
    return [[]] + [domain.changes(a, b) for a, b in zip(states, states[1:])]
