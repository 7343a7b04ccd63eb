"""Rollout: shapes, the sliding window re-embedded at positions 0..T-1, the carried state, input errors."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from pipeline.predictor import Predictor
from pipeline.tokenizer import PAD_ID, StateTokenizer

WORDS = ["the ball is at one.", "the ball is at two.", "the ball is at three.", "the ball is at four."]


class Recorder(nn.Module):
    """A stand-in predictor: records each window and state it is given; predicts 'the ball is at four.'."""

    def __init__(self, tok: StateTokenizer, T: int = 3, N: int = 6) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=tok.vocab_size, T=T, N=N, padding_idx=0)
        self.next_ids = tok.encode_states(["the ball is at four."], N).ids[0]
        self.windows: list[torch.Tensor] = []
        self.states: list[object] = []

    def predict_next(self, token_ids, state=None):
        self.windows.append(token_ids.clone())
        self.states.append(state)
        B = token_ids.shape[0]
        return self.next_ids.expand(B, -1).clone(), {"calls": 1 if state is None else state["calls"] + 1}


@pytest.fixture
def tok():
    return StateTokenizer.build(WORDS)


def test_shapes_and_text(tok):
    model = Recorder(tok)
    out = Predictor(model, tok).predict([WORDS[:3], WORDS[:1]], k=4)
    assert len(out) == 2 and all(len(row) == 4 for row in out)
    assert out[0][0] == "the ball is at four ."  # the canonical state spelling
    assert all(w.shape == (2, 3, 6) for w in model.windows) and len(model.windows) == 4


def test_window_slides_and_is_re_embedded_at_positions_0_to_T_minus_1(tok):
    model = Recorder(tok)
    Predictor(model, tok).predict([WORDS[:3], WORDS[:1]], k=3)
    enc = lambda s: tok.encode_states(s, 6).ids  # noqa: E731
    first, second, third = model.windows
    assert torch.equal(first[0], enc(WORDS[:3]))
    # A history shorter than T is padded at the front with empty (all-padding) states.
    assert (first[1, :2] == PAD_ID).all() and torch.equal(first[1, 2], enc(WORDS[:1])[0])
    # Each new window is the last T states (the prediction appended) written again into slots 0..T-1.
    assert torch.equal(second[:, :2], first[:, 1:]) and torch.equal(
        second[:, 2], model.next_ids.expand(2, -1)
    )
    assert torch.equal(third[:, :1], first[:, 2:]) and torch.equal(third[:, 1], second[:, 2])


def test_recurrent_state_is_carried_from_window_to_window(tok):
    model = Recorder(tok)
    Predictor(model, tok).predict([WORDS[:2]], k=3)
    assert model.states == [None, {"calls": 1}, {"calls": 2}]


def test_input_errors(tok):
    p = Predictor(Recorder(tok, N=4), tok)
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        p.predict([WORDS[:1]], k=0)
    with pytest.raises(ValueError, match="non-empty list of histories"):
        p.predict([], k=1)
    with pytest.raises(ValueError, match=r"states\[1\]: expected a non-empty list"):
        p.predict([["one."], []], k=1)
    with pytest.raises(ValueError, match=r"states\[0\]: expected a non-empty list"):
        p.predict(["the ball is at one."], k=1)
    with pytest.raises(ValueError, match=r"states\[0\]: state 1 has 6 tokens; the model reads at most N=4"):
        p.predict([["one.", "the ball is at two."]], k=1)
    assert len(p.predict([["one.", "the ball is at two."]], k=1, truncate=True)[0]) == 1


def test_with_a_saved_four_tensor_model(tmp_path, tok):
    from models.four_tensor import FourTensorModel
    from models.presets import four_tensor_config

    torch.manual_seed(0)
    model = FourTensorModel(four_tensor_config("tiny", vocab_size=tok.vocab_size, end_ids=tok.end_ids))
    model.save_pretrained(tmp_path)
    tok.save(tmp_path)
    p = Predictor.from_pretrained(tmp_path, device="cpu")
    histories = [WORDS[:3], WORDS[:2]]
    ids, _ = p.predict_ids(p.encode_histories(histories), k=2)
    assert ids.shape == (2, 2, p.N)
    # The second prediction is the model's answer to the slid window, computed by hand.
    window = p.encode_histories(histories)
    first, _ = model.eval().predict_next(window)
    second, _ = model.predict_next(torch.cat([window[:, 1:], first[:, None]], dim=1))
    assert torch.equal(ids[:, 0], first) and torch.equal(ids[:, 1], second)
    assert p.predict(histories, k=2) == [[tok.spell(r) for r in ids[b]] for b in range(2)]
