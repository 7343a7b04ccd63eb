"""Honest on real videos: a confidence per read state, the domain's verdict, one warning for a clip the models do
not know (in the domain's words), and states a user wrote checked before any model loads."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pipeline.confidence import check_written_states, clip_warning
from pipeline.domain import get_domain
from pipeline.outputs import states_document
from pipeline.utils import UserError
from pipeline.world_model import WorldModelPipeline
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer

REPO = Path(__file__).resolve().parents[2]
SHAPES, TEXT = get_domain("shapes"), get_domain("text")
THRESHOLD = SHAPES.confidence_threshold  # the shipped captioner's, calibrated on world against real frames
ASSET = REPO / "tests" / "assets" / "bigbuckbunny_160x90.mp4"


class ScoredCaptioner(BrightnessCaptioner):
    """Says "red ball top left ." sure of itself for dark frames, a non-state unsure of itself for bright ones."""

    def caption_scored(self, frames):
        return [("red ball top left .", -0.0001) if f.mean() < 60 else ("a rabbit ,", -0.3) for f in frames]


def test_the_warning_comes_when_most_states_are_unsure_and_says_how_to_mount_real_weights():
    t = -0.01
    assert (
        clip_warning([-0.001, -0.5, -0.001], [True, True, True], t, SHAPES) is None
    )  # one of three: no warning
    msg = clip_warning([-0.5, -0.001, -0.001], [None, False, True], t, SHAPES)  # low, unparsed, sure
    assert msg.startswith("2 of 3 states read from this clip are unsure (confidence below -0.01 or outside the "
                          "shapes domain's grammar)")  # fmt: skip
    assert "only know the built-in world" in msg and "--captioner/--predictor/--renderer" in msg


def test_free_text_warns_only_below_a_threshold_the_weights_carry_and_never_of_the_built_in_world():
    low = [-0.5, -0.5, -0.001]
    assert clip_warning(low, [None] * 3, None, TEXT) is None  # no threshold: the confidence alone never warns
    msg = clip_warning(low, [None] * 3, -0.01, TEXT)
    assert msg.startswith("2 of 3 states read from this clip are unsure (confidence below -0.01)")
    assert "built-in world" not in msg and "grammar" not in msg


def test_each_read_state_carries_its_confidence_into_the_output_and_states_json(caplog):
    pipe = WorldModelPipeline(ScoredCaptioner(), EchoPredictor(), NoiseRenderer(), domain="shapes",
                              confidence_threshold=-0.01)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="pipeline.world_model"):
        out = pipe(ASSET, horizon=1, stride=4, render=False)
    assert len(out.observed_confidence) == 4 and all(c in (-0.0001, -0.3) for c in out.observed_confidence)
    assert out.observed_parses == [c > -0.01 for c in out.observed_confidence]
    doc = states_document(out)
    observed = [s for s in doc["steps"] if s["kind"] == "observed"]
    assert [s["confidence"] for s in observed] == out.observed_confidence and doc[
        "confidence_threshold"
    ] == -0.01
    unsure = sum(c < -0.01 for c in out.observed_confidence)
    assert (len(out.warnings) == 1) == (2 * unsure > 4) and len(caplog.records) == len(out.warnings)
    plain = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer())(ASSET, horizon=1, stride=4,
                                                                                        render=False)  # fmt: skip
    assert (
        plain.observed_confidence == [None] * 4 and plain.observed_parses == [None] * 4 and not plain.warnings
    )


@pytest.mark.integration
def test_the_shipped_captioner_is_sure_on_world_frames_and_unsure_on_the_real_clip():
    """The calibration in small (bench/caption_confidence.py has the full numbers)."""
    import world

    pipe = WorldModelPipeline.from_pretrained(REPO / "weights", device="cpu")
    assert pipe.domain is SHAPES and pipe.confidence_threshold == THRESHOLD
    frames = [f for f, _ in world.frames_and_states("all", 2, seed=1, split="test")]
    scored = pipe.caption_scored(frames)
    assert min(c for _, c in scored) > THRESHOLD
    out = pipe(ASSET, horizon=1, render=False)  # read at the shipped 2 states per second
    assert max(out.observed_confidence) < THRESHOLD
    assert (
        len(out.warnings) == 1 and "only know the built-in world" in out.warnings[0]
    )  # warned, never refused
    assert len(out.predicted_states) == 1


def test_written_states_are_checked_by_the_grammar_or_the_vocabulary():
    with pytest.raises(UserError, match=r"states\[1\]: unknown word 'bal'"):
        check_written_states(["red ball top left .", "red bal top left ."], domain=SHAPES)
    vocab = {"red", "ball", "top", "left", "."}
    check_written_states(["Red ball top left."], domain=TEXT, vocabulary=vocab, max_tokens=5)
    with pytest.raises(
        UserError, match=r"states\[0\]: unknown word 'bal' .*not in the predictor's vocabulary"
    ):
        check_written_states(["red bal ."], domain=TEXT, vocabulary=vocab)
    with pytest.raises(UserError, match=r"states\[0\]: 'red \[UNK\] .' holds \[UNK\], the predictor's mark"):
        check_written_states(["red [UNK] ."], domain=TEXT, vocabulary=vocab)  # as a forecast may spell it
    with pytest.raises(
        UserError, match=r"has 6 words and marks; the predictor reads at most 5 per state: shorten"
    ):
        check_written_states(["red ball top left left ."], domain=TEXT, vocabulary=vocab, max_tokens=5)
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(), domain="shapes")
    with pytest.raises(UserError, match="unknown word 'bal'"):  # the API's /v1/rollout goes through here
        pipe(states=["red bal top left ."], horizon=1)
    with pytest.raises(UserError, match=r"unknown domain 'english' \(known: .*shapes"):
        WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(), domain="english")


def test_predict_refuses_a_misspelt_state_before_models_load(tmp_path, monkeypatch, capsys, tiny_weights):
    from pipeline import cli

    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)
    monkeypatch.setattr(WorldModelPipeline, "from_pretrained",
                        staticmethod(lambda *a, **k: pytest.fail("models were loaded")))  # fmt: skip
    states = tmp_path / "s.txt"
    states.write_text("red ball top left .\nred bal top left .\n")
    argv = ["predict", "--states", str(states), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 2  # the shipped weights: the shapes domain's grammar
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"semworld: error: --states {states}: state[1]: unknown word 'bal'")
        and "\n" not in err
    )
    assert cli.main([*argv, "--weights", str(tiny_weights)]) == 2  # free text: the predictor's vocabulary
    assert "unknown word 'bal'" in capsys.readouterr().err
    states.write_text(" ".join(["red"] * 20) + " .\n")
    assert cli.main([*argv, "--weights", str(tiny_weights)]) == 2
    err = capsys.readouterr().err
    assert "reads at most 12 per state: shorten" in err and "truncate=True" not in err
