"""Goals in words: what a plan should bring about, parsed against a domain's grammar before any model runs.

A goal is one clause or several joined by "and". A clause is one of

    a named predicate the domain registers       "return the ball", "cross the road"
    a condition on a field                        "player < 20", "player = ball y - 2", "score player > 3"
    a partial state, "*" for any word             "ball * * player 30 enemy * score * * ."

Fields are named as the domain names them (`domain.fields`: "ball x", "score player", "cars 3"); a condition
compares a field with a number or with another field plus or minus a number (=, !=, <, <=, >, >=). A condition
or a partial state must hold at some forecast step ("eventually", the default), at every step ("always ...") or
at the last ("finally ..."). A predicate judges the whole forecast itself.

Each clause scores a forecast with a cost that grows with how far the forecast is from the clause (a field's
distance in its own units), so that a search can tell near misses from far ones; an "eventually" clause that
holds costs a little more the later it first holds (`EARLIER` per step), so the search prefers the quicker
plan. The goal's cost is the sum over its clauses; `holds` says whether every clause holds. A clause that means nothing in the domain (an unknown
field, predicate or word) is refused by name (`GoalError`).

    goal = parse_goal("return the ball and player > 10", get_domain("pong"))
    goal.cost(current_fields, [forecast_fields, ...], ["up", ...])   # the lower, the nearer the goal
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.utils import UserError

Fields = Mapping[str, Any]  # a state's fields by flat name ("ball x": 25, "player": 24, ...); None: absent
MISSING = (
    8.0  # the violation of a condition on a field the state lacks (no ball) or a state that does not parse
)
EARLIER = 0.01  # per forecast step: among forecasts that reach the goal, the one that reaches it first wins
MODES = ("eventually", "always", "finally")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


class GoalError(UserError):
    """A goal that means nothing in the domain; the message names the word or field."""


@dataclass(frozen=True)
class GoalPredicate:
    """A named goal a domain registers: `cost(states, actions)` over the current state's fields (states[0],
    never None) and the forecast's (states[1:]; None where a forecast state does not parse), actions[j] being the
    action taken after states[j]; 0 exactly when achieved, else how far the forecast is from it."""

    name: str
    description: str
    cost: Callable[[Sequence[Fields | None], Sequence[str]], float]


def flatten(fields: Mapping[str, Any] | None, names: Sequence[str]) -> dict[str, Any]:
    """A parsed state's nested fields by flat name: "ball x" reads fields["ball"]["x"], "cars 3" fields["cars"][3];
    a name whose path leads through None (no ball) or past the end reads None."""
    flat: dict[str, Any] = {}
    for name in names:
        value: Any = fields
        for key in name.split():
            if isinstance(value, Mapping):
                value = value.get(key)
            elif isinstance(value, (list, tuple)) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                value = None
        flat[name] = value
    return flat


def state_fields(domain: Any, state: str) -> dict[str, Any] | None:
    """The flat fields of one state text, None when it is not a state of the domain."""
    try:
        parsed = domain.parse(state)
    except ValueError:
        return None
    return None if parsed is None else flatten(parsed, domain.fields)


@dataclass(frozen=True)
class Condition:
    """`field op value`, value a number or `other + offset`; `mode` says at which forecast steps it must hold."""

    field: str
    op: str
    value: float | None
    other: str | None = None
    offset: float = 0.0
    mode: str = "eventually"

    def violation(self, state: Fields | None) -> float:
        """0 when the condition holds in `state`, else how far the field is from holding it."""
        if state is None:
            return MISSING
        left = state.get(self.field)
        right = self.value if self.other is None else state.get(self.other)
        if left is None or right is None:
            return MISSING
        right = right + self.offset
        if _OPS[self.op](left, right):
            return 0.0
        if self.op == "!=":
            return 1.0
        gap = abs(left - right)
        return float(gap + (1 if self.op in ("<", ">") else 0))  # "< 20" at 20 is one unit short

    def cost(self, states: Sequence[Fields | None]) -> float:
        v = [self.violation(s) for s in states[1:]]  # the forecast only: the goal is about what is to come
        if not v:
            return MISSING
        if self.mode == "always":
            return sum(v) / len(v)
        if self.mode == "finally":
            return v[-1]
        return min(x + EARLIER * j for j, x in enumerate(v))

    def holds(self, states: Sequence[Fields | None]) -> bool:
        v = [self.violation(s) for s in states[1:]]
        if self.mode == "always":
            return bool(v) and max(v) == 0
        if self.mode == "finally":
            return bool(v) and v[-1] == 0
        return bool(v) and min(v) == 0


@dataclass(frozen=True)
class Clause:
    """One clause of a goal: a condition or conjunction of them (a partial state), or a domain predicate."""

    text: str
    conditions: tuple[Condition, ...] = ()
    predicate: GoalPredicate | None = None

    def cost(self, states: Sequence[Fields | None], actions: Sequence[str]) -> float:
        if self.predicate is not None:
            return float(self.predicate.cost(states, actions))
        if self.partial:  # every field it fixes at one and the same step
            steps = states[1:]
            if not steps:
                return MISSING
            return min(
                sum(c.violation(s) for c in self.conditions) + EARLIER * j for j, s in enumerate(steps)
            )
        return sum(c.cost(states) for c in self.conditions)

    @property
    def partial(self) -> bool:
        """A partial state that must hold at some step (its conditions at the same step), not one condition."""
        return len(self.conditions) > 1 and self.conditions[0].mode == "eventually"

    def holds(self, states: Sequence[Fields | None], actions: Sequence[str]) -> bool:
        if self.predicate is not None:
            return self.predicate.cost(states, actions) == 0
        if self.partial:
            return any(all(c.violation(s) == 0 for c in self.conditions) for s in states[1:])
        return all(c.holds(states) for c in self.conditions)


@dataclass(frozen=True)
class Goal:
    """A parsed goal: its clauses (all must hold); `cost` sums theirs, `holds` says whether all hold."""

    text: str
    clauses: tuple[Clause, ...]

    def cost(self, current: Fields, forecast: Sequence[Fields | None], actions: Sequence[str]) -> float:
        """The cost of a forecast from `current` under `actions` (actions[j]: the action after forecast state j-1,
        actions[0] the one after `current`)."""
        states = [current, *forecast]
        return sum(c.cost(states, actions) for c in self.clauses)

    def holds(self, current: Fields, forecast: Sequence[Fields | None], actions: Sequence[str]) -> bool:
        states = [current, *forecast]
        return all(c.holds(states, actions) for c in self.clauses)


def goal_vocabulary(domain: Any) -> str:
    """One line on what goals a domain understands (for errors and `--help`)."""
    preds = ", ".join(f'"{p}"' for p in getattr(domain, "goals", {}) or {}) or "none"
    return f"predicates: {preds}; fields: {', '.join(getattr(domain, 'fields', ()) or ()) or 'none'}"


def parse_goal(text: str, domain: Any) -> Goal:
    """The goal `text` in `domain`; GoalError naming what does not fit the domain."""
    if not isinstance(text, str) or not text.strip():
        raise GoalError("goal: expected a goal in words, e.g. a predicate or 'FIELD < NUMBER'")
    fields = tuple(getattr(domain, "fields", ()) or ())
    predicates: Mapping[str, GoalPredicate] = getattr(domain, "goals", {}) or {}
    if not fields and not predicates:
        raise GoalError(f"goal: the {domain.name} domain has no fields or predicates to plan towards")
    words = text.lower().split()
    parts: list[list[str]] = [[]]
    for w in words:
        if w == "and":
            parts.append([])
        else:
            parts[-1].append(w)
    if any(not p for p in parts):
        raise GoalError(f"goal {text!r}: 'and' joins two clauses; one side is empty")
    return Goal(" ".join(words), tuple(_clause(p, domain, fields, predicates) for p in parts))


def _clause(
    words: list[str], domain: Any, fields: tuple[str, ...], predicates: Mapping[str, GoalPredicate]
) -> Clause:
    text = " ".join(words)
    if text in predicates:
        return Clause(text, predicate=predicates[text])
    mode = "eventually"
    if words[0] in ("always", "finally", "eventually"):
        mode, words = words[0], words[1:]
        if not words:
            raise GoalError(f"goal clause {text!r}: '{mode}' needs a condition after it")
    if words[-1] == "." or "*" in words:
        return Clause(text, _partial_state(words, domain, fields, mode))
    ops = [i for i, w in enumerate(words) if w in _OPS]
    if len(ops) != 1:
        raise GoalError(
            f"goal clause {text!r}: not a predicate of the {domain.name} domain, nor 'FIELD OP VALUE' with one "
            f"of {' '.join(_OPS)} ({goal_vocabulary(domain)})"
        )
    at = ops[0]
    field = " ".join(words[:at])
    _known(field, fields, domain, text)
    rhs = words[at + 1 :]
    if len(rhs) == 1 and _is_number(rhs[0]):
        return Clause(text, (Condition(field, words[at], float(rhs[0]), mode=mode),))
    offset = 0.0
    if len(rhs) >= 3 and rhs[-2] in ("+", "-") and _is_number(rhs[-1]):
        offset = float(rhs[-1]) * (1 if rhs[-2] == "+" else -1)
        rhs = rhs[:-2]
    other = " ".join(rhs)
    if not other:
        raise GoalError(f"goal clause {text!r}: nothing after {words[at]!r}")
    _known(other, fields, domain, text)
    return Clause(text, (Condition(field, words[at], None, other, offset, mode),))


def _partial_state(
    words: list[str], domain: Any, fields: tuple[str, ...], mode: str
) -> tuple[Condition, ...]:
    """A state with "*" for any word: the fields it fixes, found by parsing it with the wildcards read twice
    (as 0 and as 1): a field that differs between the two readings is free."""
    text = " ".join(words)
    if words[-1] != ".":
        words = [*words, "."]
    readings = []
    for fill in ("0", "1"):
        try:
            readings.append(domain.parse(" ".join(fill if w == "*" else w for w in words)))
        except ValueError as err:
            raise GoalError(
                f"goal clause {text!r}: not a partial state of the {domain.name} domain ({err})"
            ) from None
    if readings[0] is None or not fields:
        raise GoalError(
            f"goal clause {text!r}: the {domain.name} domain has no fields to match a partial state to"
        )
    zero, one = (flatten(r, fields) for r in readings)
    fixed = [
        Condition(f, "=", float(zero[f]), mode=mode)
        for f in fields
        if zero[f] == one[f] and zero[f] is not None
    ]
    if not fixed:
        raise GoalError(f"goal clause {text!r}: every field is '*', so it asks for nothing")
    return tuple(fixed)


def _known(field: str, fields: tuple[str, ...], domain: Any, clause: str) -> None:
    if field not in fields:
        raise GoalError(
            f"goal clause {clause!r}: {field!r} is not a field of the {domain.name} domain "
            f"(fields: {', '.join(fields) or 'none'})"
        )


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
