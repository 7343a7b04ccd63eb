"""A captioner for a domain that records its clips (an Atari game): frames decoded from the recorded MP4 files,
scored field by field, trained and saved by the recipe path, loaded for that domain."""

import json

import numpy as np
import pytest

from pipeline.domain import get_domain
from pipeline.evaluation.metrics import caption_scores
from pipeline.training.captioner import domain_sentences, place_targets
from pipeline.utils import UserError
from tests.fakes import build_quick_game_stage


def test_caption_scores_break_a_game_state_down_by_field():
    pong = get_domain("pong")
    truth = ["ball 10 20 player 30 enemy 12 score 1 2 .", "ball none player 30 enemy 12 score 1 2 ."]
    read = ["ball 11 20 player 30 enemy 12 score 1 2 .", "ball none player 30 enemy 12 score 1 2 ."]
    scores = caption_scores(pong, read, truth)
    assert scores["exact_match"] == 0.5
    assert scores["field=ball x"] == 0.0 and scores["field=ball y"] == 1.0  # only the first truth has a ball
    assert scores["field=player"] == 1.0 and scores["field=score enemy"] == 1.0
    garbled = caption_scores(pong, ["ball ball .", "player"], truth)
    assert garbled["exact_match"] == 0.0 and garbled["field=player"] == 0.0


def test_attention_targets_of_a_game_are_the_patches_where_its_words_are_read():
    """Pong on a 10 x 10 grid of a 210 x 160 screen: the ball's numbers point at the ball's patch, each paddle's
    number at that paddle's; the keywords and the final '.' at none; a state that does not parse at none."""
    pong = get_domain("pong")
    state = "ball 30 40 player 20 enemy 12 score 1 2 ."
    t = place_targets(pong, [state, "garbled"], 14, 10, (210, 160))  # (B, L)
    row, col = int((4 * 40 - 10.5) * 10 / 210), int((4 * 30 - 47.5) * 10 / 160)
    assert t[0, 1] == t[0, 2] == 1 + row * 10 + col
    assert t[0, 4] == 1 + int((4 * 20 - 4.7) * 10 / 210) * 10 + int(141.5 * 10 / 160)  # the right paddle
    assert t[0, 6] == 1 + int((4 * 12 - 7.2) * 10 / 210) * 10 + 1  # the left paddle, column 17.5
    assert (t[0, [0, 3, 5, 7, 10, 11, 12, 13]] == -1).all() and (t[1] == -1).all()


def test_a_game_tokenizer_holds_every_word_of_the_game():
    words = set(domain_sentences(get_domain("freeway"))[0].split())
    assert words == set(get_domain("freeway").vocabulary)
    with pytest.raises(Exception, match="open vocabulary"):
        domain_sentences(get_domain("text"))


@pytest.mark.integration
def test_recorded_frames_are_the_decoded_clips_one_per_state(tmp_path):
    pytest.importorskip("ale_py")
    from pipeline.training.recorded_frames import record_frames

    pong = get_domain("pong")
    data = record_frames(pong, tmp_path / "d", clips=2, length=6, seed=3, split="val")
    records = [json.loads(line) for line in (tmp_path / "d" / "states.jsonl").read_text().splitlines()]
    assert data.frames.shape == (12, 210, 160, 3) and data.frames.dtype == np.uint8
    assert data.states == records[0]["states"] + records[1]["states"]
    stamp = (tmp_path / "d" / "states.jsonl").stat().st_mtime_ns
    # a second call reads the folder, it does not record again
    again = record_frames(pong, tmp_path / "d", clips=2, length=6, seed=3, split="val")
    assert (tmp_path / "d" / "states.jsonl").stat().st_mtime_ns == stamp
    assert np.array_equal(again.frames, data.frames)
    assert len(data.spread(5)) == 5 and data.spread(5).states[0] == data.states[0]
    # fewer clips are the first ones; more than the folder holds are refused, not quietly fewer
    assert (
        record_frames(pong, tmp_path / "d", clips=1, length=6, seed=3, split="val").states == data.states[:6]
    )
    with pytest.raises(UserError, match="holds 2 clips, fewer than the 3 asked for"):
        record_frames(pong, tmp_path / "d", clips=3, length=6, seed=3, split="val")


@pytest.mark.integration
def test_train_all_builds_a_game_captioner_that_loads_for_its_game(tmp_path):
    pytest.importorskip("ale_py")
    from pipeline.captioner import Captioner

    summary, index = build_quick_game_stage(tmp_path, "captioner")
    assert index["domain"] == "pong"
    assert index["captioner"] == ["transformers", "BlipForConditionalGeneration"]
    metrics = summary["captioner"]["metrics"]
    assert {"test_exact_match", "test_field=player", "test_frames"} <= set(metrics)
    pong = get_domain("pong")
    captioner = Captioner.from_pretrained(tmp_path / "w" / "captioner", device="cpu", domain=pong)
    vocab = set(captioner.processor.tokenizer.get_vocab())
    assert set(pong.vocabulary) <= vocab
    (read,) = captioner.caption([np.zeros((210, 160, 3), dtype=np.uint8)])
    assert isinstance(read, str)


def _tiny_run(frames: np.ndarray, states: list[str], **args):
    """A CaptionerRun of a tiny random BLIP over an in-memory pool of Pong frames."""
    import torch

    from models.captioner import build_blip, build_processor
    from models.presets import get_recipe
    from pipeline.training.captioner import CaptionerRun, build_tokenizer
    from pipeline.training.image_args import TrainCaptionerArgs
    from pipeline.training.recorded_frames import RecordedFrames

    pong = get_domain("pong")
    config = get_recipe("quick-pong-captioner").model
    torch.manual_seed(0)
    tokenizer = build_tokenizer(domain_sentences(pong))
    model, processor = build_blip(config, tokenizer), build_processor(tokenizer, config.image_size)
    targs = TrainCaptionerArgs(out="unused", model=config, domain="pong", lr=1e-3, **args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return CaptionerRun(targs, model, processor, optimizer, torch.device("cpu"), pong,
                        pool=RecordedFrames(frames, states))  # fmt: skip


def test_hard_frames_are_those_of_highest_loss_and_fill_their_share_of_each_batch(monkeypatch):
    import torch

    from pipeline.training import captioner as training

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(10, 210, 160, 3), dtype=np.uint8)
    states = [f"ball {i} {i + 3} player {20 + i} enemy 12 score {i} 0 ." for i in range(9)]
    states.append("ball none player 30 enemy 12 score 1 2 .")
    run = _tiny_run(frames, states, hard_share=0.5, hard_top=0.2, batch_size=4, steps_per_epoch=3)
    losses = training.frame_losses(run, batch=3)
    run.model.eval()  # each frame's loss is the model's own (mean over the caption's tokens), batch by batch
    for i in (0, 9):
        one = training.encode_batch(run.processor, [frames[i]], [states[i]])
        with torch.no_grad():
            assert abs(run.model(**one).loss.item() - losses[i]) < 1e-4
    run.hard = training.rank_hard(run)
    assert sorted(run.hard) == sorted(np.argsort(losses)[-2:])  # the top 20%
    seen: list[list[str]] = []
    encode = training.encode_batch
    monkeypatch.setattr(training, "encode_batch", lambda p, f, s: seen.append(list(s)) or encode(p, f, s))
    training.fit_epoch(run, 0)
    hard_states = {states[i] for i in run.hard}
    assert len(seen) == 3 and all(sum(s in hard_states for s in batch[2:]) == 2 for batch in seen)
