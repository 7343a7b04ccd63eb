"""The semantic timeline: what changed from one state to the next, in words ("red ball moved from top left to
upper left", "lamp switched off", "blue box appeared at bottom right"). States of the built-in world are compared
object by object (an object is its colour and shape); other states only as changed or not."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.utils import canonical_state


def _where(obj) -> str:  # a world.grammar.WorldObject
    from world.grammar import COLUMNS, ROWS

    return f"{ROWS[obj.row]} {COLUMNS[obj.col]}"


def changes(previous: str, current: str) -> list[str]:
    """What changed from `previous` to `current`, one phrase per change ([] when nothing did)."""
    from world.grammar import parse_state

    if canonical_state(previous) == canonical_state(current):
        return []
    try:
        before, after = parse_state(canonical_state(previous)), parse_state(canonical_state(current))
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
    out += [f"{' '.join(ident)} vanished from {_where(obj)}" for ident, obj in old.items() if ident not in new]
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


def timeline(states: Sequence[str]) -> list[list[str]]:
    """Per step, what changed since the step before (the first step: [])."""
    return [[]] + [changes(a, b) for a, b in zip(states, states[1:])]
