"""Beyond the paper's training rule: the cosine schedule, the last-slice loss, state-level scheduled sampling, and
--init-from keeping the ids of the weights it takes over."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from models.four_tensor import FourTensorConfig, FourTensorModel
from pipeline.tokenizer import StateTokenizer
from pipeline.training.args import TrainArgs
from pipeline.training.predictor import train_predictor
from pipeline.training.steps import learning_rate_factor, rollout_windows
from pipeline.utils import UserError
from tests.pipeline.training.conftest import assert_resume_equals_uninterrupted

COMMON = dict(preset="tiny", batch_size=8, val_fraction=0.2, progress=False, seed=3, max_windows=64)


def _args(**kw) -> TrainArgs:
    return TrainArgs(data="unused.jsonl", preset="tiny", out="unused", **kw)


def test_constant_schedule_is_the_papers_rule():
    args = _args()
    assert {learning_rate_factor(args, s, 100) for s in range(100)} == {1.0}


def test_cosine_schedule_warms_up_linearly_then_decays_to_the_floor():
    args = _args(lr_schedule="cosine", warmup_steps=10, min_lr_ratio=0.1)
    f = [learning_rate_factor(args, s, 110) for s in range(111)]
    assert f[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert f[10] == pytest.approx(1.0)
    assert f[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f[110] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[10:], f[11:], strict=False))  # never rises after the warmup


def _tiny_model(seed: int = 0) -> FourTensorModel:
    torch.manual_seed(seed)
    return FourTensorModel(
        FourTensorConfig(
            vocab_size=12, d_x=4, d_t=2, n_heads=2, n_layers=1, N=5, T=3, end_ids=(3,), dropout=0.3
        )
    )


def test_training_step_last_only_is_the_cross_entropy_of_the_last_slice():
    model = _tiny_model().eval()
    torch.manual_seed(1)
    full = torch.randint(2, 12, (4, 4, 5))  # (B, T+1, N)
    full[:, :, 4] = 0  # padding in every state's last slot: ignored
    logits = model(full[:, :-1])  # (B, N, T, V)
    last = F.cross_entropy(logits[:, :4, -1].reshape(-1, 12), full[:, -1, :4].reshape(-1))
    assert model.training_step(full, last_only=True).item() == pytest.approx(last.item(), rel=1e-5)
    assert model.training_step(full).item() != pytest.approx(last.item(), rel=1e-3)  # the window loss differs


def test_rollout_windows_put_the_models_own_states_in_the_context_and_keep_the_true_target():
    model = _tiny_model()
    model.train()
    K, T = 2, 3
    torch.manual_seed(2)
    long = torch.randint(2, 12, (6, T + K + 1, 5))  # (B, T+K+1, N)
    assert torch.equal(rollout_windows(model, long, K, prob=0.0), long[:, K:])

    torch.manual_seed(5)
    out = rollout_windows(model, long, K, prob=1.0)
    torch.manual_seed(5)
    torch.rand(6)  # the row draw
    k = int(torch.randint(1, K + 1, ()))
    ctx = long[:, K - k : K - k + T]
    model.eval()
    for _ in range(k):
        nxt, _ = model.predict_next(ctx)
        ctx = torch.cat([ctx[:, 1:], nxt[:, None]], dim=1)
    assert torch.equal(out[:, :T], ctx)
    assert torch.equal(out[:, T], long[:, -1])  # the target is the true state
    assert torch.equal(out[:, : T - k], long[:, K : K + T - k])  # the older context states are the true ones
    assert not torch.equal(
        out[:, T - k : T], long[:, K + T - k : K + T]
    )  # a random model does not guess them
    assert model.training is False  # the caller's mode is restored (it was eval here)


def test_schedule_last_slices_and_rollout_train_resume_and_select_on_last_ce(tmp_path, toy_jsonl):
    flags = dict(
        lr_schedule="cosine", warmup_steps=3, target_slices="last", rollout_steps=2, rollout_prob=0.5
    )
    common = dict(data=str(toy_jsonl), epochs=2, **COMMON, **flags)
    full, _ = assert_resume_equals_uninterrupted(
        tmp_path, common
    )  # the schedule and the rollout draws resume
    strip = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    plain = train_predictor(TrainArgs(out=str(tmp_path / "plain"), data=str(toy_jsonl), epochs=2, **COMMON))
    assert strip(plain["four_tensor"].history) != strip(full.history)


def test_init_from_keeps_the_tokenizer_of_the_weights(tmp_path, toy_jsonl):
    train_predictor(TrainArgs(out=str(tmp_path / "a"), data=str(toy_jsonl), epochs=1, **COMMON))
    # The same words at other frequencies would be numbered differently by a fresh tokenizer.
    lines = [json.loads(line) for line in toy_jsonl.read_text().splitlines()]
    words = sorted({w for rec in lines for s in rec["states"] for w in s.replace(".", " ").split()})
    skewed = tmp_path / "skewed.jsonl"
    skewed.write_text(
        "".join(
            json.dumps({"states": [" ".join([words[-1]] * 3 + [w]) + " ." for w in words] * 2}) + "\n"
            for _ in range(4)
        )
        + toy_jsonl.read_text()
    )
    fresh = StateTokenizer.build(
        s for line in skewed.read_text().splitlines() for s in json.loads(line)["states"]
    )
    source = StateTokenizer.from_file(tmp_path / "a")
    assert fresh.backend.get_vocab() != source.backend.get_vocab()  # the trap this guards against is real
    train_predictor(
        TrainArgs(
            out=str(tmp_path / "b"), data=str(skewed), epochs=1, init_from=str(tmp_path / "a"), **COMMON
        )
    )
    assert StateTokenizer.from_file(tmp_path / "b").backend.get_vocab() == source.backend.get_vocab()


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        (dict(lr_schedule="linear"), "--lr-schedule"),
        (dict(target_slices="first"), "--target-slices"),
        (dict(rollout_steps=2), "--rollout-steps needs --target-slices last"),
        (dict(rollout_steps=-1, target_slices="last"), "--rollout-steps"),
        (dict(target_slices="last", model="baseline"), "--target-slices last applies to the 4-tensor model"),
        (dict(min_lr_ratio=1.5), "--min-lr-ratio"),
        (dict(min_history=0), "--min-history must be >= 1"),
    ],
)
def test_bad_schedule_and_rollout_arguments_are_refused_by_name(kw, says):
    with pytest.raises(UserError, match=says):
        _args(**kw)


def test_rollouts_are_accepted_with_memory():
    _args(
        rollout_steps=2, target_slices="last", memory={}
    )  # the memory streams through the rollout steps too


def test_min_history_trains_on_front_padded_windows_and_is_refused_past_the_window(tmp_path, toy_jsonl):
    from pipeline.data import SUMMARY_FILE

    common = {**COMMON, "max_windows": None}
    train_predictor(TrainArgs(out=str(tmp_path / "full"), data=str(toy_jsonl), epochs=1, **common))
    train_predictor(
        TrainArgs(out=str(tmp_path / "m1"), data=str(toy_jsonl), epochs=1, min_history=1, **common)
    )
    full, m1 = (json.loads((tmp_path / d / SUMMARY_FILE).read_text()) for d in ("full", "m1"))
    T = 3  # the tiny preset: each sequence gives T - 1 more windows, front-padded
    n_seq = full["data"]["train_sequences"]
    assert m1["data"]["train_windows"] == full["data"]["train_windows"] + (T - 1) * n_seq
    with pytest.raises(UserError, match="--min-history 4: at most the window T=3 of --preset tiny"):
        train_predictor(
            TrainArgs(out=str(tmp_path / "m4"), data=str(toy_jsonl), epochs=1, min_history=4, **common)
        )
