"""Valid states by projection: the shapes world's automaton accepts exactly its grammar's states, an invalid
prediction becomes the best-scoring valid one, a valid argmax is kept, off is the old rollout, a domain without an
automaton (free text) means no projection."""

import json
import shutil

import numpy as np
import pytest
import torch

import world
from models.baseline import BaselineConfig, BaselineModel
from models.four_tensor import FourTensorModel
from pipeline.domain import get_domain
from pipeline.predictor import Predictor
from pipeline.projection import GrammarProjection, projection_for
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.training.captioner import sample_scene, world_sentences
from pipeline.world_model import WorldModelPipeline
from tests.fakes import accepts, tiny_four_tensor
from world.automaton import Prefix, WorldAutomaton

SHAPES = get_domain("shapes")

N = 16


@pytest.fixture(scope="module")
def tok() -> StateTokenizer:
    return StateTokenizer.build(world_sentences())


def peaked_logits(
    tok: StateTokenizer, words: list[str], runner_up: dict[int, str] | None = None
) -> torch.Tensor:
    """(1, N, V) logits: slot i puts 8 on words[i] (padding after), 4 on runner_up[i], 0 elsewhere."""
    vocab = tok.backend.get_vocab()
    logits = torch.zeros(1, N, tok.vocab_size)
    for i in range(N):
        logits[0, i, vocab[words[i]] if i < len(words) else PAD_ID] = 8.0
    for i, w in (runner_up or {}).items():
        logits[0, i, vocab[w]] = 4.0
    return logits


def test_automaton_accepts_every_valid_state_and_only_valid_states():
    automaton = WorldAutomaton(N)
    rng = np.random.default_rng(0)
    for _ in range(300):  # valid scenes of 0-3 objects, screen and lamp: all accepted
        state = world.caption(sample_scene(rng, [1, 1, 1, 1]))
        assert accepts(automaton, world.tokenize(state)), state
    for _ in range(300):  # random walks through the automaton: every one is a valid state
        prefix, words = Prefix(), []
        while prefix.phase != "done":
            options = automaton.step(prefix)
            assert options, f"dead end after {words}"
            w = list(options)[rng.integers(len(options))]
            words.append(w)
            prefix = options[w]
        world.parse_state(" ".join(words))  # raises if not valid
        assert len(words) <= world.MAX_TOKENS
    for bad in (
        "screen ball bottom midright .",
        "blue box top left , red ball top right .",
        "red ball top left , blue box top left .",
        "red ball top center , screen .",
        "lamp on , screen .",
        "red ball top left , orange .",
    ):
        assert not accepts(automaton, world.tokenize(bad)), bad


def test_an_invalid_predicted_state_becomes_the_best_valid_one(tok):
    # argmax "screen ball bottom midright ." does not parse; "blue" is slot 0's runner-up
    logits = peaked_logits(tok, world.tokenize("screen ball bottom midright ."), {0: "blue"})
    proj = GrammarProjection(SHAPES, tok, N, tok.end_ids)
    ids = proj(logits)
    assert tok.spell(ids[0]) == "blue ball bottom midright ."
    assert proj.stats.states == 1 and proj.stats.projected == 1
    # a missing item after ",": the runner-up at slot 5 ("screen") is the best way to finish
    logits = peaked_logits(tok, world.tokenize("red ball lower right , orange ."), {5: "screen"})
    assert tok.spell(proj(logits)[0]) == "red ball lower right , screen ."


def test_random_logits_always_give_a_valid_state(tok):
    torch.manual_seed(0)
    proj = GrammarProjection(SHAPES, tok, N, tok.end_ids, top_k=3, beam=4)
    ids = proj(3 * torch.randn(64, N, tok.vocab_size))  # (64, N)
    for row in ids:
        world.parse_state(tok.spell(row))
    assert proj.stats.projected > 32  # random argmaxes almost never parse: the search did the work


def test_a_valid_argmax_state_is_unchanged(tok):
    state = "green triangle upper left , purple box lower midright , lamp off ."
    logits = peaked_logits(tok, world.tokenize(state), {0: "red", 3: "right"})
    proj = GrammarProjection(SHAPES, tok, N, tok.end_ids)
    ids = proj(logits)
    assert tok.spell(ids[0]) == state and proj.stats.projected == 0
    assert torch.equal(ids, proj.argmax_ids(logits))


def test_projection_rejects_bad_arguments(tok):
    with pytest.raises(ValueError, match="top_k"):
        GrammarProjection(SHAPES, tok, N, top_k=0)
    with pytest.raises(ValueError, match="logits"):
        GrammarProjection(SHAPES, tok, N)(torch.zeros(1, N - 1, tok.vocab_size))
    with pytest.raises(ValueError, match="domain 'text' has no automaton"):
        GrammarProjection(get_domain("text"), tok, N)
    assert projection_for(get_domain("text"), tok, N) is None
    assert isinstance(projection_for(SHAPES, tok, N), GrammarProjection)


def tiny_model(tok: StateTokenizer) -> FourTensorModel:
    torch.manual_seed(0)
    return tiny_four_tensor(tok, N).eval()


HISTORIES = [["red ball top left .", "red ball upper left .", "red ball middle left ."], ["empty ."]]


def test_next_logits_are_what_predict_next_decodes(tok):
    model = tiny_model(tok)
    window = Predictor(model, tok).encode_histories(HISTORIES)
    logits, state = model.next_logits(window, "carried")
    ids, _ = model.predict_next(window)
    assert logits.shape == (2, N, tok.vocab_size) and state == "carried"
    assert torch.equal(GrammarProjection(SHAPES, tok, N, tok.end_ids).argmax_ids(logits), ids)
    base = BaselineModel(BaselineConfig.from_predictor(model.config)).eval()
    blogits, _ = base.next_logits(window)
    assert blogits.shape == (2, N, tok.vocab_size)


def test_off_is_the_old_rollout_bit_for_bit_and_on_feeds_valid_states_back(tok):
    model = tiny_model(tok)
    plain = Predictor(model, tok)
    window = plain.encode_histories(HISTORIES)
    expected, w = [], window
    for _ in range(3):  # the rollout as it was: predict_next, slide
        nxt, _ = model.predict_next(w)
        expected.append(nxt)
        w = torch.cat([w[:, 1:], nxt[:, None]], dim=1)
    ids, _ = plain.predict_ids(window, 3)
    assert torch.equal(ids, torch.stack(expected, dim=1))

    projected = Predictor(model, tok, projection=GrammarProjection(SHAPES, tok, N, tok.end_ids))
    out = projected.predict(HISTORIES, 3)
    for row in out:
        for s in row:
            world.parse_state(s)
    assert projected.projection.stats.projected > 0  # an untrained model: its argmax states do not parse
    # what the second step read is the projected first state
    ids, _ = projected.predict_ids(window, 2)
    again = projected.projection(model.next_logits(torch.cat([window[:, 1:], ids[:, :1]], dim=1))[0])
    assert torch.equal(ids[:, 1], again)


def test_world_weights_project_by_default_and_other_weights_never(tiny_weights, tmp_path):
    # tiny_weights' model_index.json names no domain (free text): no projection
    pipe = WorldModelPipeline.from_pretrained(tiny_weights, device="cpu", stages=("predictor",))
    assert pipe.predictor.projection is None
    assert Predictor.from_pretrained(tiny_weights / "predictor", device="cpu").projection is None
    world_weights = tmp_path / "world-weights"
    shutil.copytree(tiny_weights, world_weights)
    index = json.loads((world_weights / "model_index.json").read_text())
    (world_weights / "model_index.json").write_text(json.dumps({**index, "domain": "shapes"}))
    pipe = WorldModelPipeline.from_pretrained(world_weights, device="cpu", stages=("predictor",))
    assert isinstance(pipe.predictor.projection, GrammarProjection)
    for s in pipe.predictor.predict(HISTORIES, 2)[0]:
        world.parse_state(s)
    off = WorldModelPipeline.from_pretrained(
        world_weights, device="cpu", stages=("predictor",), project=False
    )
    assert off.predictor.projection is None
