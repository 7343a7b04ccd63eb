"""What a new user hits first: defaults that fit the shipped models, and checks made before any model loads."""

import pytest

from pipeline import cli
from pipeline.cli.demo import as_predicted
from pipeline.tokenizer import StateTokenizer


@pytest.fixture(autouse=True)
def no_debug(monkeypatch):
    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)


def test_demo_compares_truth_in_the_rollouts_spelling():
    tok = StateTokenizer.build(["red ball top left , lamp on .", "blue box lower right ."])
    ids = tok.encode_states(["red ball top left , lamp on ."], 16).ids[0]
    predicted = tok.spell(ids)  # what Predictor.predict returns
    assert as_predicted(tok, "red ball top left , lamp on .", 16) == predicted
    assert tok.decode(ids) != predicted  # the spelling the demo used to compare with (0/12 matched)


def test_world_generate_defaults_to_every_scenario():
    args = cli.build_parser().parse_args(["world", "generate", "--clips", "1", "--out", "x"])
    assert args.scenario == "all"
