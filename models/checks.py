"""The checks several classes share: fields of the configuration and arguments dataclasses that must be at
least some number, and the token-id windows both predictors take; each refused by name with the bad value."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


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


def check_token_ids(
    token_ids: Any, sentences: int, length: int, *, name: str, axis: str, vocab_size: int | None = None
) -> None:
    """`token_ids` must be an integer tensor (B, sentences, length) with B >= 1 (and, given vocab_size, ids in
    [0, vocab_size)); otherwise one ValueError, e.g. "token_ids: expected shape (B, T, N) = (B, 8, 16) with
    B >= 1, got (8, 16)", `axis` naming the sentence axis as the paper does."""
    expected = f"(B, {axis}, N) = (B, {sentences}, {length}) with B >= 1"
    if not isinstance(token_ids, torch.Tensor):
        raise ValueError(f"{name}: expected a LongTensor of shape {expected}, got {type(token_ids).__name__}")
    shape = tuple(token_ids.shape)
    if token_ids.dim() != 3 or shape[0] < 1 or shape[1:] != (sentences, length):
        raise ValueError(f"{name}: expected shape {expected}, got {shape}")
    if token_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name}: expected integer token ids (torch.long), got dtype {token_ids.dtype}")
    if vocab_size is not None and token_ids.numel():
        low, high = int(token_ids.min()), int(token_ids.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name}: ids must lie in [0, vocab_size={vocab_size}) ([BOS]/[EOS] are internal), "
                f"got range [{low}, {high}]"
            )
