"""The learning-rate schedule the trainers share: linear warmup, then cosine decay to a floor."""

from __future__ import annotations

import math


def warmup_cosine(lr: float, step: int, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """The rate at optimizer step `step` (zero-based): lr * (step + 1) / warmup_steps during the warmup, then a
    cosine from lr down to lr * min_lr_ratio at total_steps, flat after it."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
