"""What the evaluation tests share: a small `world generate` directory per test module."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def world_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test-split `world generate` directory (MP4s, PNG frames at 64 px, states.jsonl, seed 0) of the module's
    `WORLD = (scenarios, clips, states per clip)`."""
    from world.video import generate

    scenarios, clips, length = request.module.WORLD
    out = tmp_path_factory.mktemp("world") / "test"
    generate(out, scenarios, clips, 0, split="test", length=length, size=64, workers=1, progress=False)
    return out
