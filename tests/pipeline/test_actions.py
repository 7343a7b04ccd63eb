"""States with actions: the action slot in the tokenizer and the windows, and forecasts under given actions."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from pipeline.data import StateSequence, corpus_actions, drop_actions, make_windows
from pipeline.predictor import Predictor
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.utils import UserError

STATES = ["paddle at up", "paddle at down", "paddle at stay"]
ACTIONS = ["stay", "up", "down"]


@pytest.fixture
def tok():
    return StateTokenizer.build(STATES, actions=ACTIONS)


def test_the_action_sits_in_the_last_slot(tok):
    enc = tok.encode_states(["paddle at up", "paddle at down"], 5, ["down", None])
    assert tok.spell(enc.ids[0]) == "paddle at up"
    assert tok.action_word(int(enc.ids[0, -1])) == "down"
    assert int(enc.ids[1, -1]) == PAD_ID  # unknown
    assert tok.actions == ("stay", "up", "down")
    # a state that fills every slot but the action's is whole (spelling stops at the action); one more token
    # is cut
    full = tok.encode_states(["paddle at up at"], 5, ["up"])
    assert full.truncated == 0 and tok.spell(full.ids[0]) == "paddle at up at"
    assert tok.encode_states(["paddle at up at up"], 5, ["up"]).truncated == 1
    with pytest.raises(ValueError, match="'jump'"):
        tok.encode_states(["paddle at up"], 5, ["jump"])
    assert StateTokenizer.build(STATES).actions == ()


def test_saved_tokenizer_keeps_its_actions(tok, tmp_path):
    tok.save(tmp_path)
    assert StateTokenizer.from_file(tmp_path).actions == tok.actions


def test_windows_carry_actions_and_refuse_a_corpus_without(tok):
    seqs = [StateSequence("a", STATES * 2, {"actions": ["up", "down", "stay"] * 2})]
    assert corpus_actions(seqs) == ["down", "stay", "up"]
    w = make_windows(seqs, tok, T=2, N=5)
    assert w.ids.shape == (4, 3, 5)
    assert [tok.action_word(int(i)) for i in w.ids[0, :, -1]] == ["up", "down", "stay"]
    with pytest.raises(UserError, match='no "actions"'):
        make_windows([StateSequence("b", STATES, {})], tok, T=2, N=5)
    with pytest.raises(UserError, match="list of words"):
        corpus_actions([StateSequence("c", STATES, {"actions": [1, 2, 3]})])


def test_action_dropout_blanks_a_seeded_share_of_action_slots(tok):
    seqs = [StateSequence(str(i), STATES * 30, {"actions": ACTIONS * 30}) for i in range(4)]
    w = drop_actions(make_windows(seqs, tok, T=4, N=5), 0.25, seed=0)
    blank = (w.ids[..., -1] == PAD_ID).float().mean().item()
    assert 0.2 < blank < 0.3
    assert (w.ids[..., :-1] != PAD_ID).any()  # the states themselves are untouched


class ActionEcho(nn.Module):
    """A stand-in predictor with actions: the next state says the action of the last state it reads
    ("paddle at <action>", "stay" when unknown), and writes "up" into its action slot."""

    def __init__(self, tok: StateTokenizer, T: int = 2, N: int = 5) -> None:
        super().__init__()
        self.tok = tok
        self.config = SimpleNamespace(vocab_size=tok.vocab_size, T=T, N=N, padding_idx=0)

    def predict_next(self, token_ids, state=None):
        out = []
        for row in token_ids[:, -1]:
            said = self.tok.action_word(int(row[-1])) or "stay"
            ids = self.tok.encode_states([f"paddle at {said}"], self.config.N, ["up"]).ids[0]
            out.append(ids)
        return torch.stack(out), state


def test_forecast_follows_the_given_actions_and_says_which_it_used(tok):
    pred = Predictor(ActionEcho(tok), tok)
    history = ["paddle at stay", "paddle at stay"]
    # actions: after history state 0 and 1, then after forecast states 0 and 1 (k = 3)
    states, used = pred.predict_under([history], 3, [["stay", "down", "down", "stay"]])
    assert states == [["paddle at down", "paddle at down", "paddle at stay"]]
    assert used == [["down", "stay"]]
    # no forecast actions: the steps read them as unknown, whatever the model wrote in the slot
    states, used = pred.predict_under([history], 3, [["stay", "down"]])
    assert states == [["paddle at down", "paddle at stay", "paddle at stay"]]
    assert used == [[None, None]]
    assert pred.predict([history], 2) == [["paddle at stay", "paddle at stay"]]


def test_bad_actions_are_clear_errors(tok):
    pred = Predictor(ActionEcho(tok), tok)
    with pytest.raises(ValueError, match="at most 4"):
        pred.predict_under([["paddle at up"] * 2], 3, [["up"] * 5])
    with pytest.raises(ValueError, match="'fly'"):
        pred.predict_under([["paddle at up"] * 2], 2, [["up", "up", "fly"]])
    with pytest.raises(ValueError, match="one list per history"):
        pred.predict_under([["paddle at up"] * 2], 2, [])
    plain = StateTokenizer.build(STATES)
    states_only = Predictor(ActionEcho(plain), plain)
    with pytest.raises(ValueError, match="states alone"):
        states_only.predict_under([["paddle at up"]], 2, [["up"]])


def test_training_says_when_states_and_actions_do_not_fit_the_preset(tmp_path, caplog):
    """States of 8 words and their action in a preset of N=8 slots: every state loses its end mark, and the
    user is told before training which preset to change (a trap the Freeway data first fell into)."""
    import json
    import logging

    from pipeline.training.args import TrainArgs
    from pipeline.training.setup import prepare_data

    rows = [{"states": [f"a b c d e f g {w} ." for w in "hijkl"] * 4, "actions": ACTIONS * 6 + ACTIONS[:2]}
            for _ in range(6)]  # fmt: skip
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = TrainArgs(
        data=str(data), preset="tiny", out=str(tmp_path / "p"), val_fraction=0.34, progress=False
    )
    with caplog.at_level(logging.WARNING, logger="pipeline.training.setup"):
        prepared = prepare_data(args)
    assert prepared.tokenizer.actions == ("down", "stay", "up")
    said = caplog.text
    assert "120 of 120 states are longer than the 7 token slots a state has (N=8 of --preset tiny" in said
    assert "one slot for the action" in said and "choose a preset with a larger N" in said
