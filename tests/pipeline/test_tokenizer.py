"""The word-level tokenizer: ids, punctuation, truncation, decoding, files."""

import pytest
import torch

from pipeline.tokenizer import PAD_ID, UNK_ID, StateTokenizer

CORPUS = ["The cat sat on the mat.", "Did the dog bark?", "Tom's dog ran, fast!", "The cat sat."]


@pytest.fixture
def tok():
    return StateTokenizer.build(CORPUS)


def test_special_ids_and_end_ids(tok):
    vocab = tok.backend.get_vocab()
    assert vocab["[PAD]"] == PAD_ID == 0
    assert vocab["[UNK]"] == UNK_ID == 1
    assert tok.end_ids == (vocab["."], vocab["!"], vocab["?"])
    assert tok.vocab_size == len(vocab)


def test_lowercase_and_each_punctuation_mark_is_a_token(tok):
    assert tok.tokens("Tom's dog ran, fast!") == ["tom", "'", "s", "dog", "ran", ",", "fast", "!"]
    assert tok.tokens("THE CAT") == ["the", "cat"]
    assert tok.tokens("sat?!") == ["sat", "?", "!"]


def test_round_trip_and_padding(tok):
    enc = tok.encode_states(CORPUS, N=10)
    assert enc.ids.shape == (4, 10) and enc.ids.dtype == torch.long
    assert enc.truncated == 0
    assert (enc.ids[3, 4:] == PAD_ID).all()
    assert [tok.decode(row) for row in enc.ids] == [s.lower() for s in CORPUS]


def test_decode_stops_at_padding(tok):
    ids = tok.encode("the cat sat.") + [PAD_ID] + tok.encode("dog")
    assert tok.decode(ids) == "the cat sat."
    assert tok.spell(ids) == "the cat sat ."


def test_truncation_is_counted(tok):
    enc = tok.encode_states(["the cat sat on the mat.", "the cat."], N=4)
    assert enc.truncated == 1
    assert enc.lengths == [7, 3]
    assert tok.decode(enc.ids[0]) == "the cat sat on"


def test_unknown_words_and_min_frequency():
    tok = StateTokenizer.build(CORPUS, min_frequency=2)
    ids = tok.encode("the zebra sat.")
    assert ids[1] == UNK_ID and ids[0] != UNK_ID
    assert "mat" not in tok.backend.get_vocab()


def test_vocabulary_does_not_depend_on_corpus_order():
    a = StateTokenizer.build(CORPUS).backend.get_vocab()
    b = StateTokenizer.build(list(reversed(CORPUS))).backend.get_vocab()
    assert a == b


def test_save_load_and_transformers(tok, tmp_path):
    path = tok.save(tmp_path)
    assert path.name == "tokenizer.json"
    again = StateTokenizer.from_file(tmp_path)
    assert again.encode("Did the cat bark?") == tok.encode("Did the cat bark?")
    fast = tok.to_transformers()
    assert fast("did the cat bark?", add_special_tokens=False)["input_ids"] == tok.encode("did the cat bark?")
    assert fast.pad_token_id == 0


def test_missing_tokenizer_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        StateTokenizer.from_file(tmp_path)


def test_spell_writes_the_canonical_state_spelling():
    """Decoded predictions and captions compare as plain strings: spell(ids) is already canonical_state's output."""
    from pipeline.utils import canonical_state

    states = [
        "Red ball top left, blue box bottom right , lamp on.",
        "empty .",
        "green diamond middle center .",
    ]
    tok = StateTokenizer.build(states)
    enc = tok.encode_states(states, 16)
    for state, ids in zip(states, enc.ids):
        assert tok.spell(ids) == canonical_state(state) == canonical_state(tok.spell(ids))
