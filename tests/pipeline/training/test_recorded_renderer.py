"""A renderer for a domain that records its clips (an Atari game): objects found on its screens by colour, how far
a drawn screen puts them from the truth's, and the recipe path from recorded clips to a renderer that hands out
frames of the screen's size."""

import numpy as np
import pytest

from pipeline.domain import get_domain
from pipeline.evaluation.metrics import position_errors
from tests.fakes import build_quick_game_stage


def _screens(n: int, seed: int = 2, game: str = "pong") -> tuple[list[np.ndarray], list[str]]:
    emu, policy = get_domain(game).simulator(1, seed=seed)
    screens, states = [], []
    for _ in range(n):
        emu.step(policy(emu.ram()))
        screens.append(emu.screen())
        states.append(emu.state())
    return screens, states


def test_pong_objects_are_found_where_the_state_puts_them():
    """On the emulator's screens, each object's middle found by colour lies within 3 pixels of where the state's
    bin says it is read (the bins are 4 RAM units), and the ball is found when the state has one, except over
    the walls (the same white)."""
    pytest.importorskip("ale_py")
    pong = get_domain("pong")
    screens, states = _screens(300)
    found = 0
    for screen, state in zip(screens, states):
        where, places = pong.locate(screen), pong.word_places(state)
        if state.startswith("ball none"):
            assert where["ball"] is None
        elif where["ball"] is None:
            assert not 36 < places[1][0] < 190  # lost only against a wall
        if where["ball"] is not None:
            assert abs(where["ball"][0] - places[1][0]) <= 3.5 and abs(where["ball"][1] - places[1][1]) <= 2.5
            found += 1
        player = state.split().index("player") + 1
        assert abs(where["player"][0] - places[player][0]) <= 3.5
    assert found > 100


def test_freeway_objects_are_found_where_the_state_puts_them():
    """On Freeway's screens the chicken is found within 4.5 pixels of the row its state's bin says (a bin is 4
    RAM rows, one screen row each, so 2 of that is the bin) and at its column, and each lane's car within 3
    columns of its bin's middle (away from the screen's edges, where a car is cut in two), on its lane's row."""
    pytest.importorskip("ale_py")
    freeway = get_domain("freeway")
    screens, states = _screens(300, game="freeway")
    cars_checked = 0
    for screen, state in zip(screens, states):
        where, places = freeway.locate(screen), freeway.word_places(state)
        chicken = where["chicken"]
        assert chicken is not None
        assert abs(chicken[0] - places[1][0]) <= 4.5 and abs(chicken[1] - places[1][1]) <= 2.5
        for lane in range(10):
            car, place = where[f"car {lane}"], places[5 + lane]
            if car is not None and 16 < place[1] < 150:
                assert car[0] == place[0] and abs(car[1] - place[1]) <= 3.0, (lane, car, place)
                cars_checked += 1
    assert cars_checked > 2000


def test_position_errors_measure_how_far_objects_are_drawn_from_the_truth():
    """The court moved down by 3 rows is 3 pixels off for every object; a frame without its ball shows no ball."""
    pytest.importorskip("ale_py")
    pong = get_domain("pong")
    screens, _ = _screens(200)
    mid_court = [s for s in screens if 50 < (pong.locate(s)["ball"] or (0,))[0] < 170]
    with_ball = mid_court[:20]
    moved = []
    for s in with_ball:
        m = s.copy()
        m[37:194] = s[34:191]  # the court's pixels 3 rows lower
        moved.append(m)
    errors = position_errors(pong, moved, with_ball)
    assert len(with_ball) == 20 and errors["position_px[ball]"] == pytest.approx(3.0, abs=0.01)
    assert errors["position_px[player]"] == pytest.approx(3.0, abs=0.5)  # a paddle may meet the bottom wall
    assert errors["shown_acc[ball]"] == 1.0
    erased = [s.copy() for s in with_ball]
    for e in erased:
        court = e[34:194]
        court[(court == 236).all(-1)] = (144, 72, 17)  # the ball painted over with the background
    assert position_errors(pong, erased, with_ball)["shown_acc[ball]"] == 0.0
    assert position_errors(get_domain("shapes"), with_ball, with_ball) == {}  # a domain that finds no objects


@pytest.mark.integration
def test_train_all_builds_a_game_renderer_that_draws_screens_of_the_games_size(tmp_path):
    pytest.importorskip("ale_py")
    from pipeline.renderer import Renderer

    summary, index = build_quick_game_stage(tmp_path, "renderer")
    assert index["domain"] == "pong" and index["renderer"] == ["diffusers", "StableDiffusionPipeline"]
    assert {"psnr", "ssim", "shown_acc[ball]"} <= set(summary["renderer"]["metrics"])
    renderer = Renderer.from_pretrained(tmp_path / "w" / "renderer", device="cpu")
    assert renderer.size == (210, 160)
    frames = renderer.render(
        ["ball 20 30 player 20 enemy 12 score 1 2 .", "ball none player 8 enemy 8 score 0 0 ."]
    )
    assert [f.shape for f in frames] == [(210, 160, 3)] * 2
    vocab = set(renderer.pipe.tokenizer.get_vocab())
    assert {
        "ball",
        "player",
        "enemy",
        "none",
    } <= vocab and "circle" not in vocab  # the game's words, not the world's


def test_a_screens_static_frame_leaves_the_weight_on_what_moves():
    """The per-pixel median of Pong's screens is the court and its walls: a screen differs from it at the ball and
    the paddles, not at the walls (as white as the ball), so the reconstruction loss weighs what moves."""
    pytest.importorskip("ale_py")
    import torch

    from pipeline.training.renderer_parts import reconstruction_loss, static_background

    screens, _ = _screens(300)
    x = (
        torch.from_numpy(np.stack(screens)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
    )  # (N, 3, 210, 160)
    still = static_background(x)
    pong = get_domain("pong")
    i = next(i for i, s in enumerate(screens) if 50 < (pong.locate(s)["ball"] or (0,))[0] < 170)
    moving = (x[i] - still).abs().sum(0) > 0.05  # (210, 160)
    row, col = (round(v) for v in pong.locate(screens[i])["ball"])
    assert moving[row - 1 : row + 2, col - 1 : col + 2].any()  # the ball
    assert not moving[24:34].any() and not moving[194:].any()  # the walls
    no_ball = x[i].clone()
    no_ball[:, row - 3 : row + 4, col - 3 : col + 4] = still[:, row - 3 : row + 4, col - 3 : col + 4]
    lost = [
        float(reconstruction_loss(no_ball[None], x[i : i + 1], 50.0, background=b)) for b in (still, "corner")
    ]
    assert (
        lost[0] > 5 * lost[1]
    )  # a lost ball costs far more against the static frame than against the corner
