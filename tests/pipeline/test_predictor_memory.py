"""Predictor with a tensor-memory model: the whole history is streamed, rows of any length, state carried."""

from __future__ import annotations

import pytest
import torch

import world
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config
from models.tensor_memory import TensorMemoryConfig
from pipeline.predictor import Predictor
from pipeline.tokenizer import StateTokenizer


@pytest.fixture(scope="module")
def clips() -> list[list[str]]:
    return [r["states"] for r in world.sequences("blink,hide", 4, seed=0, length=14, split="test")]


@pytest.fixture(scope="module")
def predictor(clips: list[list[str]]) -> Predictor:
    tok = StateTokenizer.build(s for c in clips for s in c)
    torch.manual_seed(0)
    cfg = four_tensor_config(
        "small",
        vocab_size=tok.vocab_size,
        end_ids=tok.end_ids,
        memory=TensorMemoryConfig(d_emb=128, mem_channels=4, mem_shape=(2, 2, 2)),
    )
    model = FourTensorModel(cfg)
    with torch.no_grad():  # a fresh memory is faint; make its addend count so that it moves predictions
        for tap in model.memory_taps.values():
            tap.gate.fill_(4.0)
        model.memory.embedder.content.weight.mul_(30.0)
    return Predictor(model, tok)


def _manual(p: Predictor, history: list[str], k: int) -> list[str]:
    ids = p.tokenizer.encode_states(history, p.N).ids[None]  # (1, L, N)
    state = p.model.stream_memory(ids)
    out, _ = p.predict_ids(ids[:, -p.T :], k, state)
    return [p.tokenizer.spell(out[0, j]) for j in range(k)]


def test_predict_streams_the_whole_history(predictor: Predictor, clips: list[list[str]]):
    history = clips[1][:12]
    assert predictor.predict([history], 3) == [_manual(predictor, history, 3)]
    # The memory does see beyond the window: a different early history changes the streamed state.
    other = clips[3][:8] + history[8:]
    ids = lambda h: predictor.tokenizer.encode_states(h, predictor.N).ids[None]  # noqa: E731
    assert not torch.allclose(
        predictor.model.stream_memory(ids(history)).h, predictor.model.stream_memory(ids(other)).h
    )


def test_histories_of_different_lengths_in_one_batch(predictor: Predictor, clips: list[list[str]]):
    histories = [clips[0][:13], clips[1][:5], clips[2][:2], clips[3][:9]]
    batched = predictor.predict(histories, 2)
    alone = [predictor.predict([h], 2)[0] for h in histories]
    assert batched == alone


def test_rollout_carries_the_state(predictor: Predictor, clips: list[list[str]]):
    """k states at once = one state at a time from the history extended by the predictions."""
    history = clips[2][:9]
    rolled = predictor.predict([history], 3)[0]
    step = []
    for _ in range(3):
        step.append(predictor.predict([history + step], 1)[0][0])
    assert rolled == step
