"""The one check that the configuration and arguments dataclasses share: fields that must be at least some
number, refused by name with the bad value."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def check_at_least(
    obj: Any,
    names: Iterable[str],
    low: int = 1,
    *,
    label: Callable[[str], str] = str,
    error: type[Exception] = ValueError,
) -> None:
    """Each field `names` of `obj` must be >= `low`; the first that is not raises `error` "LABEL must be >= LOW,
    got VALUE", `label` spelling the field's name as its reader knows it (a flag, "PixelConfig.context")."""
    for name in names:
        value = getattr(obj, name)
        if value < low:
            raise error(f"{label(name)} must be >= {low}, got {value}")
