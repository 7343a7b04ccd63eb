"""Recording Atari episodes in the real emulator (ale-py): seeded clips, actions that act, files a user opens."""

import json

import numpy as np
import pytest

pytest.importorskip("ale_py")

from pipeline.cli import main  # noqa: E402
from pipeline.domains.atari.games import ACTIONS, GAMES  # noqa: E402
from pipeline.domains.atari.record import Emulator, clip_seed, generate, record_clip  # noqa: E402


def test_a_clip_is_its_seed():
    a = record_clip("pong", 7, 24, frames=False)
    b = record_clip("pong", 7, 24, frames=False)
    c = record_clip("pong", 8, 24, frames=False)
    assert a.states == b.states and a.actions == b.actions
    assert a.states != c.states
    assert len(a.states) == len(a.actions) == 24
    assert set(a.actions) <= set(ACTIONS)
    for s in a.states:
        GAMES["pong"].parse(s)


def test_splits_draw_their_own_episodes():
    seeds = {split: {clip_seed(split, 0, i) for i in range(50)} for split in ("train", "val", "test")}
    assert not (seeds["train"] & seeds["test"]) and not (seeds["train"] & seeds["val"])
    with pytest.raises(ValueError, match="split"):
        clip_seed("dev", 0, 0)


def test_the_warm_up_decides_how_far_into_a_game_a_clip_starts():
    """No warm-up: every clip starts at the console's reset. Up to 1,750 steps of play before each: clips from
    every phase of a Freeway game, its later scores among them."""
    fresh = [record_clip("freeway", clip_seed("train", 0, i), 2, frames=False, warmup=0) for i in range(3)]
    assert {c.states[0] for c in fresh} == {fresh[0].states[0]}
    assert " score 0 " in fresh[0].states[0]
    late = [record_clip("freeway", clip_seed("train", 0, i), 2, frames=False, warmup=1750) for i in range(12)]
    scores = [int(c.states[0].split()[3]) for c in late]
    assert max(scores) >= 5 and len(set(scores)) > 3, scores
    with pytest.raises(ValueError, match="warmup"):
        generate("freeway", "unused", clips=1, warmup=-1)


def test_a_clip_may_start_at_a_drawn_score_which_the_screen_shows():
    """Freeway's score set in RAM before a clip: the states carry scores from the whole range, the screen draws
    the set score (its digits differ from the score play left), and play goes on counting from it."""
    plain = record_clip("freeway", clip_seed("train", 0, 0), 2, warmup=0)
    clips = [record_clip("freeway", clip_seed("train", 0, i), 2, warmup=0, score_max=40) for i in range(10)]
    scores = [int(c.states[0].split()[3]) for c in clips]
    assert all(0 <= s <= 40 for s in scores) and max(scores) >= 19 and len(set(scores)) >= 5, scores
    top = slice(0, 20)  # the score's rows
    for clip, score in zip(clips, scores):
        differs = (clip.frames[0][top] != plain.frames[0][top]).any()
        assert differs == (score != 0), score
    climbed = record_clip("freeway", clip_seed("train", 0, 3), 400, warmup=0, score_max=30, policy="tracking")
    first, last = (int(climbed.states[k].split()[3]) for k in (0, -1))
    assert last > first
    with pytest.raises(ValueError, match="score-max must be >= 0"):
        generate("freeway", "unused", clips=1, score_max=-1)


def test_pongs_player_score_may_be_drawn_and_a_game_without_a_score_writer_refuses(monkeypatch):
    """Pong's player score set in RAM (14) before a clip: drawn from 0..20, shown on the screen; 21, which ends a
    game, is refused; a game whose score cannot be set refuses --score-max by name."""
    pong = GAMES["pong"]
    plain = record_clip("pong", clip_seed("train", 0, 0), 2, warmup=0)
    clips = [record_clip("pong", clip_seed("train", 0, i), 2, warmup=0, score_max=20) for i in range(10)]
    scores = [pong.parse(c.states[0])["score"]["player"] for c in clips]
    assert all(0 <= s <= 20 for s in scores) and max(scores) >= 8 and len(set(scores)) >= 5, scores
    top = slice(0, 22)  # the scores' rows
    for clip, score in zip(clips, scores):
        assert (clip.frames[0][top] != plain.frames[0][top]).any() == (score != 0), score
    with pytest.raises(ValueError, match="0..20"):
        generate("pong", "unused", clips=1, score_max=21)
    monkeypatch.setattr(type(pong), "score_bytes", lambda self, score: None)
    with pytest.raises(ValueError, match="cannot set the score"):
        generate("pong", "unused", clips=1, score_max=5)


@pytest.mark.parametrize("game", ["pong", "freeway"])
def test_up_and_down_move_the_player_apart(game):
    """The actions are wired to the right console inputs: from one saved state, holding "up" and holding "down"
    for 8 steps end with the controlled object in different places, and a restore replays exactly."""
    emu = Emulator(GAMES[game], seed=3)
    for _ in range(120):
        emu.step("stay")
    snap = emu.clone()
    key = GAMES[game].controlled
    ends = {}
    for action in ("up", "down", "up"):
        emu.restore(snap)
        for _ in range(8):
            emu.step(action)
        ends.setdefault(action, []).append(GAMES[game].parse(emu.state())[key])
    assert ends["up"][0] == ends["up"][1]  # restore is exact
    assert ends["up"][0] != ends["down"][0]


def test_generate_writes_clips_states_and_actions(tmp_path):
    from pipeline.video import read_video

    path = generate("pong", tmp_path, clips=2, seed=1, length=16, policy="tracking", progress=False)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 2
    r = records[0]
    assert len(r["states"]) == len(r["actions"]) == len(r["rewards"]) == 16
    assert r["fps"] == 15 and r["stride"] == 1 and r["policy"] == "tracking"
    frames = read_video(tmp_path / r["clip"]).frames
    assert len(frames) == 16 and frames[0].shape[:2] == (210, 160)
    again = tmp_path / "again"
    generate("pong", again, clips=2, seed=1, length=16, policy="tracking", progress=False)
    assert (again / "states.jsonl").read_bytes() == path.read_bytes()
    first, second = (tmp_path / r["clip"]).read_bytes(), (again / r["clip"]).read_bytes()
    if first != second:  # say whether the pictures or only the encoding differ
        same = all(
            np.array_equal(a, b) for a, b in zip(frames, read_video(again / r["clip"]).frames, strict=True)
        )
        pytest.fail(
            f"the same clip encoded twice: {len(first)} and {len(second)} bytes, decoded frames equal: {same}"
        )


def test_cli_records_and_refuses_actions_options_elsewhere(tmp_path, capsys):
    assert main(["world", "generate", "--domain", "freeway", "--clips", "1", "--length", "8", "--no-video",
                 "--sticky", "0.25", "--out", str(tmp_path / "fw"), "--no-progress"]) == 0  # fmt: skip
    rec = json.loads((tmp_path / "fw" / "states.jsonl").read_text())
    assert rec["sticky"] == 0.25 and "clip" not in rec and not (tmp_path / "fw" / "clips").exists()
    assert (
        main(["world", "generate", "--clips", "1", "--policy", "random", "--out", str(tmp_path / "w")]) == 2
    )
    assert "no actions" in capsys.readouterr().err
    assert main(["world", "generate", "--clips", "1", "--warmup", "10", "--out", str(tmp_path / "w")]) == 2
    assert "--warmup" in capsys.readouterr().err
    assert main(["world", "generate", "--clips", "1", "--score-max", "9", "--out", str(tmp_path / "w")]) == 2
    assert "--score-max" in capsys.readouterr().err
    assert main(["world", "generate", "--domain", "pong", "--clips", "1", "--no-video", "--score-max", "25",
                 "--out", str(tmp_path / "p"), "--no-progress"]) == 2  # fmt: skip
    assert "0..20" in capsys.readouterr().err
    assert main(["world", "generate", "--domain", "freeway", "--clips", "2", "--length", "2", "--no-video",
                 "--warmup", "0", "--score-max", "30", "--out", str(tmp_path / "s"), "--no-progress"]) == 0  # fmt: skip
    scores = [json.loads(line)["states"][0].split()[3] for line in (tmp_path / "s" / "states.jsonl").open()]
    assert scores != ["0", "0"]
    assert main(["world", "generate", "--domain", "freeway", "--clips", "1", "--length", "2", "--no-video",
                 "--warmup", "-1", "--out", str(tmp_path / "bad"), "--no-progress"]) == 2  # fmt: skip
    assert "--warmup must be >= 0" in capsys.readouterr().err
    assert main(["world", "generate", "--domain", "pong", "--clips", "1", "--policy", "greedy",
                 "--out", str(tmp_path / "g")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "greedy" in err and "runs" in err and not (tmp_path / "g").exists()


def test_sticky_actions_make_the_console_disobey_sometimes():
    """Under sticky actions the console sometimes repeats its last input: holding "up" after "down" from one
    saved state moves the paddle otherwise than without stickiness (seeded, so the difference is fixed)."""
    ends = []
    for sticky in (0.0, 0.25):
        emu = Emulator(GAMES["pong"], seed=5, sticky=sticky)
        path = []
        for t in range(200):
            emu.step("down" if (t // 6) % 2 else "up")
            path.append(emu.state())
        ends.append(path)
    assert ends[0] != ends[1]


def test_the_runs_policy_holds_its_random_actions_for_a_while():
    def longest(values: list, keep) -> int:  # the longest stretch of consecutive values that `keep` accepts
        best = run = 0
        for v in values:
            run = run + 1 if keep(v) else 0
            best = max(best, run)
        return best

    clips = {p: [record_clip("freeway", s, 200, policy=p, warmup=0, frames=False) for s in range(6)]
             for p in ("mix", "runs")}  # fmt: skip
    downs = {p: max(longest(c.actions, lambda a: a == "down") for c in cs) for p, cs in clips.items()}
    assert downs["mix"] < 6 <= downs["runs"]
    with pytest.raises(ValueError, match="runs"):
        record_clip("freeway", 0, 4, policy="walks", frames=False)


@pytest.mark.parametrize(
    ("game", "seed", "digest"), [("freeway", 0, "9be4ae0ddf5266f1"), ("pong", 3, "3052102a65190d78")]
)
def test_the_mixed_policy_records_what_the_shipped_recipes_recorded(game, seed, digest):
    # The shipped weights' recipes record their data under "mix": a change to the policies (such as "runs") must
    # leave its draws, and so every recipe's data, as they were. The digests are of clips recorded before "runs".
    import hashlib

    c = record_clip(game, seed, 32, policy="mix", warmup=40, frames=False)
    assert hashlib.sha256(json.dumps([c.states, c.actions]).encode()).hexdigest()[:16] == digest
