"""Ground-truth frames: a state fully determines its frame, and the simulator's frames agree at state instants."""

import numpy as np
import pytest

from world import SCENARIOS, STRIDE, episode, frames_and_states, render_state


def test_render_state_shape_and_size():
    frame = render_state("red ball top left , blue box bottom right , lamp on .")
    assert frame.shape == (128, 128, 3) and frame.dtype == np.uint8
    assert render_state("empty .", size=256).shape == (256, 256, 3)
    with pytest.raises(ValueError, match="size"):
        render_state("empty .", size=8)
    with pytest.raises(ValueError, match="'bal'"):
        render_state("red bal top left .")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_simulator_frames_equal_render_state_at_state_instants(name):
    for index in range(3):
        ep = episode(name, seed=9, index=index, length=12)
        frames = ep.frames(STRIDE)  # (F, 128, 128, 3)
        assert len(frames) == 11 * STRIDE + 1
        for k, state in enumerate(ep.states):
            assert np.array_equal(frames[k * STRIDE], render_state(state)), (name, k, state)


def test_different_states_give_different_frames():
    states = [
        "empty .",
        "lamp on .",
        "lamp off .",
        "screen .",
        "red ball top left .",
        "red box top left .",
        "orange ball top left .",
        "red ball upper left .",
        "red ball top midleft .",
        "red triangle top left .",
        "red diamond top left .",
    ]
    frames = [render_state(s).tobytes() for s in states]
    assert len(set(frames)) == len(states)


def test_object_sits_at_its_cell():
    frame = render_state("blue ball bottom right .").astype(int)
    background = render_state("empty .").astype(int)
    changed = np.argwhere(np.abs(frame - background).sum(-1) > 0)  # (P, 2) pixel coordinates
    cell = 128 / 5
    assert changed[:, 0].min() >= 4 * cell and changed[:, 1].min() >= 4 * cell
    centre = changed.mean(axis=0)
    assert np.allclose(centre, 4.5 * cell, atol=1.0)


def test_frames_and_states_pairs_match():
    pairs = list(frames_and_states("hide", 2, seed=0, length=6))
    assert len(pairs) == 12
    for frame, state in pairs:
        assert np.array_equal(frame, render_state(state))


def test_strip_picture(tmp_path):
    from world.strip import make_strip

    ep = episode("blink", seed=0, index=0, length=3)
    make_strip([("blink", ep.states, ep.predictable, 0)], tmp_path / "strip.png")
    from PIL import Image

    img = np.asarray(Image.open(tmp_path / "strip.png").convert("RGB")).astype(int)
    h, w = img.shape[:2]
    assert (
        abs(w / h - (1.75 * 3) / 2.45) < 0.05
    )  # one row of three frames (the figure's 1.75 x 2.45 in cells)
    for state in ep.states:  # every state's room colour (lamp on or off) is drawn
        room = render_state(state)[0, 0].astype(int)
        assert (np.abs(img - room).sum(-1) < 12).sum() > 500, state
