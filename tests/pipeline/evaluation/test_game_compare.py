"""`semworld eval compare --domain pong`: emulator episodes with their true futures under each action sequence,
frames scored against the true screens, and the command's plumbing on a quickly trained stack."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.domain import get_domain

pytestmark = pytest.mark.integration  # the emulator, shipped weights, subprocesses

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def episodes():
    pytest.importorskip("ale_py")
    from pipeline.evaluation.game_compare import record_screen_episodes

    return record_screen_episodes(get_domain("pong"), 3, T=8, horizon=5, seed=4)


def test_episodes_hold_a_clip_of_the_context_and_every_future(episodes):
    """The context went through H.264 (close to the screens, not equal); the held futures start from the same
    emulator state and obey their action: under "all up" the paddle ends no lower than under "all down"."""
    ep = episodes[0]
    assert len(ep.context) == len(ep.history) == 8 and len(ep.actions) == 7
    assert set(ep.futures) == {"logged", "all up", "all down", "all stay"}
    for acts, states, screens in ep.futures.values():
        assert len(acts) == len(states) == len(screens) == 5 and screens[0].shape == (210, 160, 3)
    assert ep.futures["all up"][0] == ["up"] * 5
    pong = get_domain("pong")
    for ep in episodes:
        up = pong.parse(ep.futures["all up"][1][-1])["player"]
        down = pong.parse(ep.futures["all down"][1][-1])["player"]
        assert up <= down


def test_the_true_screens_score_as_the_truth(episodes):
    """Scoring the emulator's own future screens: no object is away from its place, each is shown exactly when
    the truth shows it, and the shipped captioner reads nearly all of them exactly."""
    from pipeline.captioner import Captioner
    from pipeline.evaluation.game_compare import score_frames

    pong = get_domain("pong")
    captioner = Captioner.from_pretrained(REPO / "weights" / "pong" / "captioner", device="cpu", domain=pong)
    truth = [ep.futures["logged"][2] for ep in episodes]
    scores, read = score_frames(pong, captioner, episodes, "logged", truth)
    assert scores["position_px"] == [0.0] * 5 and scores["shown"] == [1.0] * 5
    assert np.mean(scores["exact"]) >= 0.8
    held = [[ep.context[-1]] * 5 for ep in episodes]  # copy-last: the ball is elsewhere a step later
    assert np.mean(score_frames(pong, captioner, episodes, "logged", held)[0]["position_px"]) > 1.0
    assert len(read) == 3 and len(read[0]) == 5


def test_the_command_compares_a_game_stack_and_says_what_is_missing(tmp_path, capsys):
    pytest.importorskip("ale_py")
    from models.pixel import PixelConfig
    from pipeline.cli import main
    from pipeline.training.image_args import TrainPixelArgs
    from pipeline.training.pixel import train_pixel
    from tests.fakes import build_quick_game_stage

    build_quick_game_stage(tmp_path, ["captioner", "renderer", "predictor"])
    tiny = PixelConfig(image_size=32, hid_s=4, hid_t=8, downsample=2, translator_blocks=1, kernel=3)
    train_pixel(TrainPixelArgs(out=str(tmp_path / "px"), domain="pong", clips=2, length=12, steps=1, batch_size=2,
                               eval_clips=1, eval_every=1, progress=False, model=tiny))  # fmt: skip
    cli = [sys.executable, "-m", "pipeline.cli", "eval", "compare", "--domain", "pong", "--threads", "1"]
    run = subprocess.run([*cli, "--weights", str(tmp_path / "w"), "--pixel", str(tmp_path / "px"), "--episodes",
                          "2", "--horizon", "3", "--figures", str(tmp_path / "fig"), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert set(result["logged"]) == {"semworld", "semworld_true_states", "pixel", "copy_last"}
    assert len(result["logged"]["pixel"]["exact"]) == 3 and set(result["counterfactual"]["semworld"]) == {
        "all up", "all down", "all stay"}  # fmt: skip
    assert {"exact_mean", "position_px_mean", "counterfactual_direction"} <= set(
        result["summary"]["semworld"]
    )
    assert all(Path(f).is_file() for f in result["figures"])
    from pipeline.cli.eval_compare_game import markdown_tables

    assert "the player's paddle moves as in the emulator" in markdown_tables(result)  # the domain's own noun
    (tmp_path / "w2").mkdir()
    assert main(["eval", "compare", "--domain", "pong", "--weights", str(tmp_path / "w2")]) == 2
    assert main(["eval", "compare"]) == 2  # the built-in world's comparison without its --data and --pixel
    said = capsys.readouterr().err.splitlines()
    assert "no captioner, predictor, renderer folder" in said[-2] and "needs --data and --pixel" in said[-1]
