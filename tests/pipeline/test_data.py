"""Readers (JSONL, ROCStories CSV) and their errors, the seeded split by story, and windows."""

import json

import pytest
import torch

from pipeline.data import (
    StateSequence,
    cap_windows,
    detect_format,
    make_windows,
    read_sequences,
    split_sequences,
)
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.utils import UserError

from .conftest import toy_sequences, write_jsonl


def test_jsonl_reader_keeps_extra_keys(toy_jsonl):
    seqs = read_sequences(toy_jsonl)
    assert len(seqs) == 60
    assert seqs[0].id == "toy0"
    assert seqs[0].states[0].startswith("The ")
    assert seqs[0].extra["predictable"] == [True] * len(seqs[0].states)
    assert "states" not in seqs[0].extra


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"states": ["a."]}', "{not json"], r"bad\.jsonl:2: not valid JSON"),
        (
            ['{"states": ["a."]}', "", '{"sentences": ["a."]}'],
            r"bad\.jsonl:3: \"states\" must be a non-empty list",
        ),
        (['{"states": []}'], r"bad\.jsonl:1: \"states\" must be a non-empty list"),
        (['{"states": ["a.", 3]}'], r"bad\.jsonl:1: state 1 is int, expected a string"),
        (['["a.", "b."]'], r"bad\.jsonl:1: expected a JSON object"),
        (["", "  "], r"bad\.jsonl: contains no sequences"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=message):
        read_sequences(path)


def test_rocstories_reader(roc_csv):
    seqs = read_sequences(roc_csv)
    assert len(seqs) == 12
    assert seqs[3].id == "id-3"
    assert seqs[3].states == [
        "Tom went to shop 3.",
        "He bought milk, then bread!",
        "Was it raining?",
        "He walked home.",
        "Tom drank the milk 3.",
    ]
    assert seqs[3].extra == {"storytitle": "Title 3"}


def test_rocstories_errors(tmp_path):
    missing = tmp_path / "missing.csv"
    missing.write_text("storyid,storytitle,sentence1,sentence2\nx,t,a.,b.\n")
    with pytest.raises(
        UserError, match=r"missing\.csv:1: ROCStories header lacks sentence3, sentence4, sentence5"
    ):
        read_sequences(missing)
    empty = tmp_path / "empty.csv"
    empty.write_text(
        "storyid,storytitle,sentence1,sentence2,sentence3,sentence4,sentence5\n"
        "a,t,s1.,s2.,s3.,s4.,s5.\nb,t,s1.,,s3.,s4.,s5.\n"
    )
    with pytest.raises(UserError, match=r"empty\.csv:3: empty sentence2"):
        read_sequences(empty)


def test_format_by_extension_and_override(tmp_path, toy_jsonl):
    assert detect_format("x.jsonl") == "jsonl"
    assert detect_format("x.CSV") == "rocstories"
    with pytest.raises(UserError, match=r"cannot tell the format.*'\.txt'.*--format"):
        detect_format("x.txt")
    odd = tmp_path / "toy.txt"
    odd.write_text(toy_jsonl.read_text())
    assert len(read_sequences(odd, fmt="jsonl")) == 60
    with pytest.raises(UserError, match="no such file"):
        read_sequences(tmp_path / "nope.jsonl")


def test_split_is_seeded_and_by_story():
    seqs = [StateSequence(f"s{i}", [f"state {i}."] * 5) for i in range(40)]
    a = split_sequences(seqs, val_fraction=0.2, seed=1, test_fraction=0.1)
    b = split_sequences(seqs, val_fraction=0.2, seed=1, test_fraction=0.1)
    c = split_sequences(seqs, val_fraction=0.2, seed=2, test_fraction=0.1)
    ids = lambda xs: [s.id for s in xs]  # noqa: E731
    assert ids(a.val) == ids(b.val) and ids(a.train) == ids(b.train)
    assert ids(a.val) != ids(c.val)
    assert (len(a.train), len(a.val), len(a.test)) == (28, 8, 4)
    assert sorted(ids(a.train) + ids(a.val) + ids(a.test)) == sorted(ids(seqs))  # every story in exactly one


def test_windows_of_one_story_stay_in_one_split(toy_jsonl):
    seqs = read_sequences(toy_jsonl)
    split = split_sequences(seqs, 0.25, seed=0)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    train, val = make_windows(split.train, tok, 3, 8), make_windows(split.val, tok, 3, 8)
    train_ids = {split.train[int(i)].id for i in train.sequence_index}
    val_ids = {split.val[int(i)].id for i in val.sequence_index}
    assert train_ids and val_ids and not train_ids & val_ids


def test_window_shapes_and_contents():
    tok = StateTokenizer.build(["a b c.", "d e."])
    seqs = [
        StateSequence("x", ["a.", "b.", "c.", "d.", "e."]),
        StateSequence("y", ["a b c.", "d e."]),
        StateSequence("z", ["a.", "b.", "c.", "d."]),
    ]
    ws = make_windows(seqs, tok, T=3, N=4)
    assert ws.ids.shape == (3, 4, 4)  # x gives 2 windows, z gives 1, y (2 states) none
    assert ws.sequence_index.tolist() == [0, 0, 2] and ws.start.tolist() == [0, 1, 0]
    assert ws.skipped == 1
    assert [tok.decode(r) for r in ws.ids[1]] == ["b.", "c.", "d.", "e."]
    assert ws.pad_fraction == pytest.approx(float((ws.ids == PAD_ID).float().mean()))
    assert ws.stats()["windows"] == 3


def test_min_history_front_pads_windows_like_a_short_history():
    tok = StateTokenizer.build(["a b c.", "d e."])
    seqs = [StateSequence("x", ["a.", "b.", "c.", "d.", "e."]), StateSequence("y", ["a b c.", "d e."])]
    full = make_windows(seqs, tok, T=3, N=4)
    ws = make_windows(seqs, tok, T=3, N=4, min_history=1)
    # x: 5 states give 5 - 1 windows (2 front-padded); y: 2 states now give 1 window, nothing skipped
    assert ws.ids.shape == (5, 4, 4) and ws.skipped == 0
    assert ws.sequence_index.tolist() == [0, 0, 0, 0, 1]
    assert (ws.ids[0, :2] == PAD_ID).all() and [tok.decode(r) for r in ws.ids[0, 2:]] == ["a.", "b."]
    assert [tok.decode(r) for r in ws.ids[1, 1:]] == ["a.", "b.", "c."] and (ws.ids[1, 0] == PAD_ID).all()
    assert torch.equal(ws.ids[2:4], full.ids)  # then the full windows, unchanged
    assert torch.equal(make_windows(seqs, tok, T=3, N=4, min_history=3).ids, full.ids)
    with pytest.raises(ValueError, match="min_history must be in 1..T=3, got 4"):
        make_windows(seqs, tok, T=3, N=4, min_history=4)


def test_rocstories_story_gives_one_window_at_T4(roc_csv):
    seqs = read_sequences(roc_csv)
    tok = StateTokenizer.build(s for q in seqs for s in q.states)
    ws = make_windows(seqs, tok, T=4, N=5)
    assert ws.ids.shape == (12, 5, 5)
    assert ws.truncated == 12 * 3  # sentences 1, 2 and 5 have 6, 7 and 6 tokens
    assert tok.decode(ws.ids[0, 4]) == "tom drank the milk 0"


def test_cap_windows_is_seeded():
    tok = StateTokenizer.build(["a."])
    ws = make_windows([StateSequence(str(i), ["a."] * 6) for i in range(10)], tok, 2, 2)
    a, b = cap_windows(ws, 7, seed=3), cap_windows(ws, 7, seed=3)
    assert len(a) == 7 and torch.equal(a.sequence_index, b.sequence_index)
    assert cap_windows(ws, None, 0) is ws


def test_toy_helper_round_trip(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", toy_sequences(3))
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["toy0", "toy1", "toy2"]
