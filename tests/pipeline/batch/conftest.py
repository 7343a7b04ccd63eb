"""Inputs for the batch tests: a few small world clips in a folder, and the stand-in stages of the API tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FACTORY = "tests.fakes:make_pipeline"


@pytest.fixture(scope="session")
def world_clips(tmp_path_factory) -> Path:
    """Four test-split world clips (7 states, 64 px) as `world generate` writes them; copy before changing."""
    from world.video import generate

    out = tmp_path_factory.mktemp("batch-world")
    generate(out, "bounce,fast", 4, 0, split="test", length=7, size=64, workers=1, progress=False)
    return out


@pytest.fixture
def clips_dir(world_clips, tmp_path) -> Path:
    """A private copy of the world clips folder (tests add bad files to it)."""
    folder = tmp_path / "in"
    shutil.copytree(world_clips / "clips", folder)
    return folder


@pytest.fixture
def fake_stages(monkeypatch):
    """Every batch run in this test loads the API tests' stand-in stages instead of weights."""
    monkeypatch.setenv("SEMWORLD_PIPELINE_FACTORY", FACTORY)
    monkeypatch.delenv("FAKE_RENDER_DELAY", raising=False)
