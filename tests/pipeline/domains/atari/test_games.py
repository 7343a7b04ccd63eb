"""The Atari state languages: spelling and parsing round trips, errors that name the word, the timeline."""

import numpy as np
import pytest

from pipeline.domain import get_domain
from pipeline.domains.atari.games import GAMES, QUANTUM, Freeway, Pong
from tests.fakes import accepts


def pong_ram(ball=(100, 80), player=120, enemy=60, score=(3, 5)) -> np.ndarray:
    ram = np.zeros(128, dtype=np.uint8)
    ram[49], ram[54] = ball
    ram[51], ram[50] = player, enemy
    ram[14], ram[13] = score
    return ram


def test_pong_reads_ram_into_words():
    pong = Pong()
    fields = pong.read(pong_ram())
    assert pong.spell(fields) == f"ball {100 // QUANTUM} {80 // QUANTUM} player 30 enemy 15 score 3 5 ."
    assert pong.parse(pong.spell(fields)) == fields
    out_of_play = pong.read(pong_ram(ball=(205, 0)))
    assert out_of_play["ball"] is None
    assert pong.spell(out_of_play).startswith("ball none player")
    assert pong.parse(pong.spell(out_of_play)) == out_of_play


def test_pong_bins_are_the_positions_the_screen_can_tell_apart():
    pong = Pong()
    # the player's paddle is drawn in steps of two RAM units: 2k + 1 and 2k + 2 look alike, so share a bin
    for k in range(20, 100):
        assert (
            pong.read(pong_ram(player=2 * k + 1))["player"] == pong.read(pong_ram(player=2 * k + 2))["player"]
        )
    assert pong.read(pong_ram(player=122))["player"] != pong.read(pong_ram(player=123))["player"]
    # the computer's paddle is hidden behind the top wall at y <= enemy_hidden: all those read alike
    hidden = {pong.read(pong_ram(enemy=y))["enemy"] for y in range(0, Pong.enemy_hidden + 1)}
    assert hidden == {Pong.enemy_hidden // QUANTUM}
    assert pong.read(pong_ram(enemy=Pong.enemy_hidden + 4))["enemy"] == Pong.enemy_hidden // QUANTUM + 1


def test_freeway_reads_ten_lanes():
    fw = Freeway()
    ram = np.zeros(128, dtype=np.uint8)
    ram[14], ram[103] = 100, 7
    ram[108:118] = np.arange(10) * 16
    fields = fw.read(ram)
    assert fields == {"chicken": 25, "score": 7, "cars": [i * 4 for i in range(10)]}
    assert fw.parse(fw.spell(fields)) == fields
    ram[103] = 0x16  # the console counts crossings in binary-coded decimal: 16 crossings
    assert fw.read(ram)["score"] == 16


@pytest.mark.parametrize(
    ("game", "text", "word"),
    [
        ("pong", "ball 3 4 paddle 2 enemy 1 score 0 0 .", "paddle"),
        ("pong", "ball 3 99 player 2 enemy 1 score 0 0 .", "99"),
        ("pong", "ball 3 4 player 2 enemy 1 score 0 .", "score"),
        ("pong", "ball 3 4 player 2 enemy 1 score 0 0", "ends with"),
        ("freeway", "chicken 3 score 0 cars 1 2 3 .", "cars"),
        ("freeway", "hen 3 score 0 cars 1 2 3 4 5 6 7 8 9 10 .", "hen"),
    ],
)
def test_bad_states_name_what_is_wrong(game, text, word):
    with pytest.raises(ValueError, match=word):
        GAMES[game].parse(text)


def test_domains_are_registered_with_actions():
    for name in ("pong", "freeway"):
        d = get_domain(name)
        assert d.actions == ("stay", "up", "down")
        assert d.max_tokens == GAMES[name].max_tokens
        assert d.parse("ball none player 2 enemy 1 score 0 0 ." if name == "pong" else
                       "chicken 3 score 0 cars 1 2 3 4 5 6 7 8 9 10 .") is not None  # fmt: skip
    shapes = get_domain("shapes")
    assert shapes.actions == ()


def test_timeline_names_each_changed_field():
    d = get_domain("pong")
    assert d.changes("ball 3 4 player 2 enemy 1 score 0 0 .", "ball 4 5 player 2 enemy 1 score 0 0 .") == [
        "ball 3 4 -> 4 5"
    ]
    assert d.changes("ball 3 4 player 2 enemy 1 score 0 0 .", "ball none player 2 enemy 1 score 0 1 .") == [
        "ball 3 4 -> none",
        "score 0 0 -> 0 1",
    ]
    assert d.changes("ball 3 4 player 2 enemy 1 score 0 0 .", "ball 3 4 player 2 enemy 1 score 0 0 .") == []


def test_pong_says_where_each_word_is_read_within_two_pixels_of_the_screen():
    """The places a captioner's attention is pulled onto: on the emulator's own frames, the ball's numbers sit on
    the ball and each paddle's number on that paddle (found by colour), and the words without a place are None."""
    pytest.importorskip("ale_py")
    pong = get_domain("pong")
    emu, _ = pong.simulator(3, seed=1)
    rng = np.random.default_rng(1)
    checked = {"ball": 0, "player": 0, "enemy": 0}
    for _ in range(400):
        emu.step(("up", "down", "stay")[rng.integers(3)])
        screen, state = emu.screen(), emu.state()
        places = pong.word_places(state)
        words = state.split()
        assert len(places) == len(words)
        assert all(place is None for place, w in zip(places, words) if not w.isdigit())
        at = dict(zip(("ball", "player", "enemy"), (2, words.index("player") + 1, words.index("enemy") + 1)))
        for name, colour in (("ball", (236, 236, 236)), ("player", (92, 186, 92)), ("enemy", (213, 130, 74))):
            ys, xs = np.nonzero((screen[34:194] == colour).all(-1))
            if (
                len(ys) == 0
                or (name == "ball" and words[1] == "none")
                or (name != "ball" and np.ptp(ys) < 15)
            ):
                continue  # not on the screen, or a paddle half behind a wall
            row, col = places[at[name]]
            middle = (34 + (ys.min() + ys.max()) / 2, (xs.min() + xs.max()) / 2)
            assert abs(row - middle[0]) <= 2.5 and abs(col - middle[1]) <= 2.5
            checked[name] += 1
    assert min(checked.values()) > 100
    assert pong.word_places("not a state") is None


@pytest.mark.parametrize("name", ["pong", "freeway"])
def test_the_game_automaton_accepts_exactly_the_states_that_parse(name):
    """Every state the game spells is accepted; states with a word dropped, swapped or added are accepted exactly
    when the game's parser takes them (Pong's "ball none" and "ball x y" are both whole states)."""
    game = GAMES[name]
    automaton = game.automaton(20)
    rng = np.random.default_rng(0)
    for _ in range(200):
        ram = rng.integers(0, 64, size=128).astype(np.uint8)  # scores within NUMBERS
        if name == "pong" and rng.random() < 0.3:
            ram[54] = 0  # the ball out of play
        words = game.spell(game.read(ram)).split()
        assert accepts(automaton, words)
        at = int(rng.integers(len(words) - 1))
        for broken in (words[:at] + words[at + 1 :], [*words[:at], words[at + 1], words[at], *words[at + 2 :]],
                       [*words[:at], "7", *words[at:]]):  # fmt: skip
            try:
                game.parse(" ".join(broken))
                valid = True
            except ValueError:
                valid = False
            assert accepts(automaton, broken) == valid, broken
    assert all(len(layout) <= game.max_tokens for layout in game.layouts)
    with pytest.raises(ValueError, match="no layout"):
        game.automaton(3)


def test_a_pong_forecast_with_its_slots_out_of_line_is_projected_onto_a_valid_state():
    """The ball coming into play moves every later word one slot on; a forecast whose slots mix the two layouts
    ("ball none player 45 45 22 ...") becomes the best-scoring state that parses."""
    import torch

    from pipeline.projection import GrammarProjection
    from pipeline.tokenizer import PAD_ID, StateTokenizer

    pong = get_domain("pong")
    tok = StateTokenizer.build(
        ["ball none player 45 enemy 22 score 1 4 .", "ball 31 31 player 45 enemy 31 score 1 4 ."]
    )
    vocab = tok.backend.get_vocab()
    argmax = "ball none player 45 45 22 score 1 4 .".split()
    logits = torch.zeros(1, 16, tok.vocab_size)
    for i in range(16):
        logits[0, i, vocab[argmax[i]] if i < len(argmax) else PAD_ID] = 8.0
    logits[0, 4, vocab["enemy"]] = 7.0  # the runner-up that puts the state back in line
    proj = GrammarProjection(pong, tok, 16, tok.end_ids)
    assert tok.spell(proj(logits)[0]) == "ball none player 45 enemy 22 score 1 4 ."
    assert proj.stats.projected == 1


def test_pong_says_which_frames_cannot_show_their_state():
    """A ball inside the top wall is not drawn; any other frame shows its state."""
    pong = Pong()
    court = np.zeros((210, 160, 3), np.uint8)
    court[:] = (144, 72, 17)  # the court's brown, darker than any ball
    shown = court.copy()
    shown[100:102, 80:83] = (236, 236, 236)  # a 2 x 3 ball
    blurred = court.copy()
    blurred[100:102, 80:83] = (255, 221, 168)  # a ball as H.264 tints it: its blue well under the white's
    state = "ball 30 26 player 20 enemy 12 score 1 2 ."
    assert not pong.unshown(shown, state) and not pong.unshown(blurred, state)
    assert pong.unshown(court, state)  # a ball in play, no pixel of it in the court
    assert not pong.unshown(court, "ball none player 20 enemy 12 score 1 2 .")
    assert not pong.unshown(shown, "not a state")
    assert not Freeway().unshown(court, "anything")  # a game that says nothing shows every state
