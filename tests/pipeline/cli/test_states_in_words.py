"""`semworld predict --states` as a user reads it: given states without a confidence column, forecasts outside the
world grammar marked, and the timeline and parse verdicts in --json."""

from __future__ import annotations

import json

from pipeline import cli
from pipeline.world_model import WorldModelPipeline
from tests.fakes import NoiseRenderer, WorldCaptioner, WorldPredictor


def _world_stand_ins(monkeypatch) -> None:
    pipe = WorldModelPipeline(WorldCaptioner(), WorldPredictor(), NoiseRenderer(), domain="shapes")
    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(lambda *a, **k: pipe))


def test_given_states_print_plainly_and_unparsed_forecasts_are_marked(monkeypatch, tmp_path, capsys):
    _world_stand_ins(monkeypatch)
    states = tmp_path / "s.txt"
    states.write_text("red ball top left , lamp on .\nempty .\n")
    assert (
        cli.main(
            ["predict", "--states", str(states), "-k", "2", "--steps", "1", "--out", str(tmp_path / "o")]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "  t=0   red ball top left , lamp on .\n" in text and "n/a" not in text
    )  # nothing was read: no score
    assert "predicted 2 states (? : not a shapes state):\n  t=2   ? empty room .\n" in text


def test_json_has_the_timeline_and_the_parse_verdicts(monkeypatch, tmp_path, capsys):
    _world_stand_ins(monkeypatch)
    states = tmp_path / "s.txt"
    states.write_text("red ball top left , lamp on .\nred ball top midleft , lamp on .\n")
    argv = [
        "predict",
        "--states",
        str(states),
        "-k",
        "1",
        "--steps",
        "1",
        "--out",
        str(tmp_path / "o"),
        "--json",
    ]
    assert cli.main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["observed_parses"] == [True, True] and doc["predicted_parses"] == [True]
    assert doc["changes"] == [
        [],
        ["red ball moved from top left to top midleft"],
        ["red ball moved from top midleft to top center", "lamp switched off"],
    ]
