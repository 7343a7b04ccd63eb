"""The shipped predictor (weights/predictor, with tensor memory) recalls what has left its window of T = 4 states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.predictor import Predictor

FOLDER = Path(__file__).resolve().parents[2] / "weights" / "predictor"
ON, OFF = "lamp on .", "lamp off ."


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.from_pretrained(FOLDER, device="cpu")


def test_config_says_memory_is_on_with_its_knobs(predictor):
    config = json.loads((FOLDER / "config.json").read_text())
    assert config["memory"]["mem_shape"] == [4, 4, 4] and config["memory"]["chunk_size"] == config["N"]
    assert predictor.has_memory and predictor.T == 4


def test_blink_histories_alike_in_the_window_are_told_apart_by_the_memory(predictor):
    # The world's blink lamp is on 5 states, then off 5. Each pair ends in the same 4 states; only the state
    # before the window (now in the memory) says whether the lamp switches next.
    histories = [[ON] * 5 + [OFF] * 4, [ON] * 5 + [OFF] * 5, [OFF] * 5 + [ON] * 4, [OFF] * 5 + [ON] * 5]
    predictor.model.memory_read_off = False
    assert predictor.predict(histories, 3) == [[OFF, ON, ON], [ON, ON, ON], [ON, OFF, OFF], [OFF, OFF, OFF]]
    predictor.model.memory_read_off = True  # the ablation: the window alone cannot tell the pairs apart
    try:
        zeroed = [p[0] for p in predictor.predict(histories, 1)]
    finally:
        predictor.model.memory_read_off = False
    assert zeroed[0] == zeroed[1] and zeroed[2] == zeroed[3]
