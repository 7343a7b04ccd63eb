"""Tiny corpora for the pipeline tests: learnable toy state sequences in JSONL, a ROCStories-style CSV, and a
states file of one world state (what `semworld predict --states` reads)."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

COLORS = ("red", "blue", "green")
THINGS = ("ball", "cube", "cat")


def toy_sequences(n: int = 60, seed: int = 0) -> list[dict]:
    """Objects that move one square per state: the next state is predictable from the window."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        color, thing, start = rng.choice(COLORS), rng.choice(THINGS), rng.randint(0, 4)
        length = rng.randint(4, 7)
        states = [f"The {color} {thing} is at square {start + k}." for k in range(length)]
        out.append({"id": f"toy{i}", "states": states, "predictable": [True] * length})
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def toy_jsonl(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "toy.jsonl", toy_sequences())


@pytest.fixture
def states_file(tmp_path: Path) -> Path:
    """A states file of one state of the built-in world: "red ball top left ."."""
    path = tmp_path / "s.txt"
    path.write_text("red ball top left .\n")
    return path


@pytest.fixture
def roc_csv(tmp_path: Path) -> Path:
    path = tmp_path / "stories.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["storyid", "storytitle", *[f"sentence{i}" for i in range(1, 6)]])
        for i in range(12):
            w.writerow(
                [
                    f"id-{i}",
                    f"Title {i}",
                    f"Tom went to shop {i}.",
                    "He bought milk, then bread!",
                    "Was it raining?",
                    "He walked home.",
                    f"Tom drank the milk {i}.",
                ]
            )
    return path
