"""Mirror averaging: the word swap is its own inverse, the averaged forecast is mirror-equivariant (a mirrored
history gets the mirrored forecast, memory included), and only weights with a known mirror can ask for it."""

import json
import shutil

import pytest
import torch

import world
from models.four_tensor import FourTensorModel
from models.tensor_memory import TensorMemoryConfig
from pipeline.domain import get_domain
from pipeline.predictor import Predictor
from pipeline.projection import GrammarProjection
from pipeline.symmetry import MirrorAveraged, mirror_for, mirror_permutation
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.training.captioner import world_sentences
from pipeline.utils import UserError
from pipeline.world_model import WorldModelPipeline
from tests.fakes import tiny_four_tensor

N = 16


@pytest.fixture(scope="module")
def tok() -> StateTokenizer:
    return StateTokenizer.build(world_sentences())


def mirrored(state: str) -> str:
    return " ".join(world.grammar.MIRROR.get(w, w) for w in state.split())


def test_the_permutation_swaps_the_column_words_and_undoes_itself(tok):
    perm = mirror_permutation(tok, world.grammar.MIRROR)
    vocab = tok.backend.get_vocab()
    assert perm[vocab["left"]] == vocab["right"] and perm[vocab["midright"]] == vocab["midleft"]
    assert perm[vocab["center"]] == vocab["center"] and perm[vocab["top"]] == vocab["top"]
    assert perm[PAD_ID] == PAD_ID and torch.equal(perm[perm], torch.arange(tok.vocab_size))
    assert torch.equal(mirror_for(get_domain("shapes"), tok), perm)
    assert mirror_for(get_domain("text"), tok) is None  # free text has no known symmetry
    with pytest.raises(ValueError, match="undo itself"):
        mirror_permutation(tok, {"left": "right", "midleft": "right"})


def tiny_model(tok: StateTokenizer, memory: bool = False) -> FourTensorModel:
    torch.manual_seed(0)
    mem = TensorMemoryConfig(d_emb=32, mem_channels=4, mem_shape=(2, 2, 2)) if memory else None
    model = tiny_four_tensor(tok, N, memory=mem).eval()
    if memory:
        with torch.no_grad():  # a fresh memory is faint; make it count so that it moves predictions
            for tap in model.memory_taps.values():
                tap.gate.fill_(4.0)
            model.memory.embedder.content.weight.mul_(30.0)
    return model


HISTORY = [
    "red ball top left , blue box bottom midright .",
    "red ball upper midleft , blue box bottom right .",
    "red ball middle center , blue box bottom midright .",
]


def test_a_mirrored_window_gets_the_mirrored_distribution(tok):
    model = tiny_model(tok)
    perm = mirror_for(get_domain("shapes"), tok)
    both = MirrorAveraged(model, perm)
    window = Predictor(model, tok).encode_histories([HISTORY])  # (1, T, N)
    logp, _ = both.next_logits(window)
    logp_m, _ = both.next_logits(perm[window])
    assert torch.allclose(logp_m[..., perm], logp, atol=1e-6)
    plain = torch.log_softmax(model.next_logits(window)[0], dim=-1)
    plain_m = torch.log_softmax(model.next_logits(perm[window])[0], dim=-1)
    assert not torch.allclose(
        plain_m[..., perm], plain, atol=1e-3
    )  # an untrained model is not symmetric itself
    ids, _ = both.predict_next(window)
    assert torch.equal(ids, GrammarProjection(get_domain("shapes"), tok, N, tok.end_ids).argmax_ids(logp))


def test_with_memory_both_views_stream_and_roll_out_mirror_equivariant(tok):
    model = tiny_model(tok, memory=True)
    perm = mirror_for(get_domain("shapes"), tok)
    both = MirrorAveraged(model, perm)
    history = (
        HISTORY + ["red ball lower midright , blue box bottom center ."] * 3
    )  # longer than T: the memory reads
    ids = tok.encode_states(history, N).ids[None]  # (1, L, N)
    state, state_m = both.stream_memory(ids), both.stream_memory(perm[ids])
    assert state.h.shape[0] == 2  # (2B, ...): the history and its mirror
    logp, _ = both.next_logits(ids[:, -4:], state)
    logp_m, _ = both.next_logits(perm[ids[:, -4:]], state_m)
    assert torch.allclose(logp_m[..., perm], logp, atol=1e-5)
    plain, plain_m = (
        torch.log_softmax(model.next_logits(w[:, -4:], model.stream_memory(w))[0], dim=-1)
        for w in (ids, perm[ids])
    )
    assert not torch.allclose(
        plain_m[..., perm], plain, atol=1e-3
    )  # the model alone is not: the test can tell
    predictor = Predictor(both, tok, projection=GrammarProjection(get_domain("shapes"), tok, N, tok.end_ids))
    out, out_m = predictor.predict([history, [mirrored(s) for s in history]], 4)
    assert out_m == [mirrored(s) for s in out]
    for s in out:
        world.parse_state(s)


def test_only_weights_with_a_known_mirror_can_ask_for_it(tiny_weights, tmp_path):
    with pytest.raises(UserError, match="mirror averaging needs .* the text domain has none"):
        Predictor.from_pretrained(tiny_weights / "predictor", device="cpu", mirror=True)
    weights = tmp_path / "w"
    shutil.copytree(tiny_weights, weights)
    index = json.loads((weights / "model_index.json").read_text())
    (weights / "model_index.json").write_text(json.dumps({**index, "grammar": "world"}))
    predictor = Predictor.from_pretrained(weights / "predictor", device="cpu", domain="shapes", mirror=True)
    assert isinstance(predictor.model, MirrorAveraged)
    assert len(predictor.predict([HISTORY], 2)[0]) == 2
    pipe = WorldModelPipeline.from_pretrained(weights, device="cpu", stages=("predictor",), mirror=True)
    assert isinstance(pipe.predictor.model, MirrorAveraged)
    plain = WorldModelPipeline.from_pretrained(weights, device="cpu", stages=("predictor",))
    assert not isinstance(plain.predictor.model, MirrorAveraged)
