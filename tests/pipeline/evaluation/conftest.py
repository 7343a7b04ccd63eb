"""What the evaluation tests share: small `world generate` directories."""

from __future__ import annotations

from pathlib import Path

import pytest


def generated(tmp_path_factory: pytest.TempPathFactory, scenarios: str, clips: int, length: int) -> Path:
    """A test-split `world generate` directory (MP4s, PNG frames at 64 px, states.jsonl), seed 0."""
    from world.video import generate

    out = tmp_path_factory.mktemp("world") / "test"
    generate(out, scenarios, clips, 0, split="test", length=length, size=64, workers=1, progress=False)
    return out
