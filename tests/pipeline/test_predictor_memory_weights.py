"""The shipped predictor (weights/predictor: an 8-state window with the tensor memory) on the world's memory scenes.

The window holds T = 8 states, so blink's switch and hide's walker (6 states behind the screen) are inside it;
the memory is still on, streamed over the whole history (docs/tensor-memory.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.predictor import Predictor

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

FOLDER = Path(__file__).resolve().parents[2] / "weights" / "predictor"
ON, OFF = "lamp on .", "lamp off ."


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.from_pretrained(FOLDER, device="cpu")


def test_config_says_memory_is_on_with_its_knobs_and_the_window_is_eight_states(predictor):
    config = json.loads((FOLDER / "config.json").read_text())
    assert config["memory"]["mem_shape"] == [4, 4, 4] and config["memory"]["chunk_size"] == config["N"]
    assert predictor.has_memory and predictor.T == 8


def test_blink_switches_after_five_states_on_and_five_off(predictor):
    # The world's blink lamp is on 5 states, then off 5: how long the lamp has been in its state says what is next.
    histories = [[ON] * 5 + [OFF] * 4, [ON] * 5 + [OFF] * 5, [OFF] * 5 + [ON] * 4, [OFF] * 5 + [ON] * 5]
    assert predictor.predict(histories, 3) == [[OFF, ON, ON], [ON, ON, ON], [ON, OFF, OFF], [OFF, OFF, OFF]]


def test_hides_walker_comes_out_of_the_screen_as_it_went_in(predictor):
    # Six states behind the screen, then the walker comes out on the far side, same colour, shape and row, still
    # walking the way it went in (two clips of the world's test split, seed 0).
    out_left = ["red box top right , screen .", "red box top midright , screen ."] + ["screen ."] * 6
    out_right = ["green triangle upper left , screen .", "green triangle upper midleft , screen ."] + [
        "screen ."
    ] * 6
    assert predictor.predict([out_left, out_right], 2) == [
        ["red box top midleft , screen .", "red box top left , screen ."],
        ["green triangle upper midright , screen .", "green triangle upper right , screen ."],
    ]
