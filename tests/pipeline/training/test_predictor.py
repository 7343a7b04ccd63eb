"""Training end to end on tiny models: files written, eval below uniform, resume equals uninterrupted, both."""

import json

import numpy as np
import pytest
import torch

from pipeline.cli.demo import DEMO_FILES
from pipeline.training.args import TrainArgs
from pipeline.training.predictor import CHECKPOINT_DIR, train_predictor
from pipeline.utils import UserError
from tests.pipeline.training.conftest import (
    assert_resume_equals_uninterrupted,
    eval_json,
    tiny_run,
    train_cli,
)

ARGS = ["--preset", "tiny", "--batch-size", "8", "--val-fraction", "0.2", "--no-progress"]


def _assert_curve(path, lines: int) -> None:
    """The L_S(T) plot: a 660 x 440 image (6 x 4 in at 110 dpi) with `lines` coloured curves drawn on it."""
    from PIL import Image

    img = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert img.shape == (440, 660, 3)
    # matplotlib's default cycle: C0 blue (31, 119, 180), C1 orange (255, 127, 14); the uniform line is grey
    for colour in [(31, 119, 180), (255, 127, 14)][:lines]:
        assert (np.abs(img - np.array(colour)).sum(-1) < 30).sum() > 50, colour


def test_two_epochs_write_weights_that_eval_scores_below_uniform(tmp_path, toy_jsonl, capsys):
    out = tmp_path / "run"
    train_cli(toy_jsonl, out, "--epochs", "2", *ARGS)
    trained = [name for name in DEMO_FILES if name not in ("data.jsonl", "checkpoint")]  # what a run writes
    for name in (*trained, f"{CHECKPOINT_DIR}/last.pt"):
        assert (out / name).is_file(), name
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
    assert set(log[0]) == {
        "epoch",
        "train_loss",
        "val_selection_loss",
        "val_last_ce",
        "val_token_acc",
        "val_exact_acc",
        "seconds",
    }
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["stopped_by"] == "budget" and summary["epochs_run"] == 2
    assert summary["config"]["vocab_size"] == summary["vocab_size"]
    assert summary["config"]["end_ids"]  # set from the tokenizer's '.', '!', '?'
    _assert_curve(out / "loss_curve.png", lines=1)

    result = eval_json(capsys, out, toy_jsonl, split="val")
    assert result["model"] == "four_tensor"
    assert result["L_S(T)"] < result["uniform_ce"]
    # The recorded validation split is rebuilt exactly: eval reproduces the selected epoch's number.
    assert result["L_S(T)"] == pytest.approx(summary["best"]["val_last_ce"], abs=1e-5)
    assert 0.0 <= result["token_acc"] <= 1.0 and 0.0 <= result["exact_acc"] <= 1.0


def test_resume_after_kill_equals_uninterrupted(tmp_path, toy_jsonl):
    run = tiny_run(toy_jsonl, epochs=3, seed=3, max_windows=64)
    full, _ = assert_resume_equals_uninterrupted(tmp_path, run)
    assert (tmp_path / "cut" / "model.safetensors").read_bytes() == (
        tmp_path / "full" / "model.safetensors"
    ).read_bytes()
    # The comparison can fail: another seed gives other weights.
    other = train_predictor(TrainArgs(out=str(tmp_path / "other"), **{**run, "seed": 4, "epochs": 1}))
    assert other["four_tensor"].history[0]["val_selection_loss"] != full.history[0]["val_selection_loss"]


def test_resume_refuses_a_different_run(tmp_path, toy_jsonl):
    run = tiny_run(toy_jsonl)
    train_predictor(TrainArgs(out=str(tmp_path / "r"), **run))
    with pytest.raises(UserError, match="checkpoint of a different run.*seed"):
        train_predictor(TrainArgs(out=str(tmp_path / "r"), seed=9, **run))


def test_both_models_on_the_same_windows(tmp_path, toy_jsonl, capsys):
    out = tmp_path / "both"
    train_cli(toy_jsonl, out, "--model", "both", "--epochs", "1", "--max-windows", "24", *ARGS)
    _assert_curve(out / "loss_curves.png", lines=2)
    s4 = json.loads((out / "four_tensor" / "training_summary.json").read_text())
    sb = json.loads((out / "baseline" / "training_summary.json").read_text())
    assert s4["data"] == sb["data"] and s4["data"]["train_windows"] == 24
    assert s4["model"] == "four_tensor" and sb["model"] == "baseline"
    result = eval_json(capsys, out / "baseline", toy_jsonl)
    assert result["model"] == "baseline" and result["windows"] > 24


def test_causal_slices_reach_the_model_config():
    from pipeline.tokenizer import StateTokenizer
    from pipeline.training.predictor import build_model

    tok = StateTokenizer.build(["a b.", "c?"])
    plain = build_model("four_tensor", "tiny", tok).config
    masked = build_model("four_tensor", "tiny", tok, causal_slices=True).config
    flag = "causal_slices" if hasattr(plain, "causal_slices") else "slice_causal"
    assert getattr(plain, flag) is False and getattr(masked, flag) is True
    assert masked.vocab_size == tok.vocab_size and masked.end_ids == tok.end_ids


def test_the_saved_weights_are_always_those_of_the_minimum_epoch(tmp_path, toy_jsonl):
    """Section 8.2: weights are written only when an epoch is the minimum of the validation selection loss so far,
    so after every epoch model.safetensors holds the best epoch's weights, not the latest (a run that saved every
    epoch fails here: with this (too high) learning rate the loss rises after the first epoch)."""
    from safetensors.torch import load_file

    out = tmp_path / "rule"
    seen: list[tuple[int, dict[str, torch.Tensor]]] = []

    def after_epoch(kind: str, epoch: int) -> None:
        last = torch.load(out / CHECKPOINT_DIR / "last.pt", weights_only=False)
        seen.append((epoch, {k: v.clone() for k, v in last["model"].items()}))
        history = last["history"]
        losses = [h["val_selection_loss"] for h in history]
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        saved = load_file(str(out / "model.safetensors"))
        best_state = dict(seen)[best + 1]
        assert all(torch.equal(saved[k], best_state[k]) for k in saved), (
            f"epoch {epoch}: not the minimum's weights"
        )

    args = TrainArgs(data=str(toy_jsonl), preset="tiny", out=str(out), epochs=3, batch_size=8, val_fraction=0.2,
                     lr=1.0, dropout=0.0, patience=10, progress=False)  # fmt: skip
    result = train_predictor(args, on_epoch_end=after_epoch)["four_tensor"]
    losses = [h["val_selection_loss"] for h in result.history]
    assert len(seen) == 3 and result.best_epoch < len(losses) - 1, (
        losses
    )  # an epoch after the minimum: not saved
    assert json.loads((out / "training_summary.json").read_text())["best_epoch"] == result.best_epoch + 1


@pytest.mark.parametrize(
    ("flags", "key", "saved", "evaluated"),
    [
        (
            ["--attention", "attentime"],
            "attention",
            "attentime",
            "four_tensor",
        ),  # Attentime inside the 4-tensor model
        (
            ["--model", "attentime_lm"],
            "semworld_model",
            "attentime_lm",
            "attentime_lm",
        ),  # the 1-D Attentime LM
    ],
)
def test_attentime_variants_train_through_the_cli_and_load_as_predictors(
    tmp_path, toy_jsonl, capsys, flags, key, saved, evaluated
):
    out = tmp_path / "run"
    train_cli(toy_jsonl, out, "--epochs", "1", *ARGS, *flags)
    assert json.loads((out / "config.json").read_text())[key] == saved
    assert eval_json(capsys, out, toy_jsonl, split="val")["model"] == evaluated


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        (
            dict(model="baseline", attention="attentime"),
            "--attention attentime applies to --model four_tensor only",
        ),
        (dict(attention="qkv"), "--attention 'qkv': expected four_tensor or attentime"),
        (
            dict(model="attentime_lm", causal_slices=True),
            "--causal-slices applies to the 4-tensor model only",
        ),
    ],
)
def test_attentime_arguments_that_cannot_work_are_refused(tmp_path, kw, says):
    with pytest.raises(UserError, match=says):
        TrainArgs(data="d.jsonl", preset="tiny", out=str(tmp_path), **kw)


def test_a_tiny_or_unsure_corpus_is_said_before_training_and_the_result_against_chance(tmp_path, caplog):
    """A corpus of a few captioned clips, most states unsure (as `semworld batch` marks real footage read by
    models that do not know it): the user is told before training, and the result is set against chance."""
    import logging

    rows = [{"states": [f"red ball {r} left ." for r in ("top", "upper", "middle", "lower", "bottom")] * 2,
             "unsure": [True] * 9 + [False]} for _ in range(6)]  # fmt: skip
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = TrainArgs(data=str(data), preset="tiny", out=str(tmp_path / "p"), epochs=1, batch_size=8,
                     val_fraction=0.34, progress=False)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="pipeline.training.predictor"):
        train_predictor(args)
    said = caplog.text
    assert "training windows (6 sequences): a predictor learns little from fewer than 500" in said
    assert "54 of 60 states are marked unsure by the captioner" in said
    assert "vs chance" in said and "token accuracy" in said
