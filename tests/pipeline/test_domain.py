"""Domains: the registry by name (and the older "grammar": "world"), the built-in shapes world and the free-text
domain behind one protocol, each one's timeline, and a domain registered at run time reaching the pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.domain import (
    Domain,
    domain_of_index,
    get_domain,
    known_domains,
    parse_error,
    parses,
    register_domain,
    timeline,
)
from pipeline.utils import UserError


def test_the_registry_resolves_names_aliases_and_the_free_text_default():
    shapes, text = get_domain("shapes"), get_domain(None)
    assert shapes.name == "shapes" and text.name == "text"
    assert get_domain("world") is shapes  # the older name still loads
    assert isinstance(shapes, Domain) and isinstance(text, Domain)
    assert domain_of_index({"grammar": "world"}) is shapes  # every checkpoint shipped before "domain"
    assert domain_of_index({"domain": "shapes"}) is shapes
    assert domain_of_index({}) is text  # weights that name none: free text
    assert {"shapes", "text"} <= set(known_domains())
    with pytest.raises(
        UserError, match=r"model_index.json: unknown domain 'atlantis' \(known: .*shapes.*text"
    ):
        domain_of_index({"domain": "atlantis"})
    with pytest.raises(UserError, match="domain must be a name"):
        domain_of_index({"domain": 3})


def test_shapes_changes_name_moves_appearances_and_the_lamp():
    shapes = get_domain("shapes")
    a = "red ball top left , blue box bottom right , lamp on ."
    b = "red ball upper left , green triangle top right , screen , lamp off ."
    assert shapes.changes(a, b) == [
        "red ball moved from top left to upper left",
        "green triangle appeared at top right",
        "blue box vanished from bottom right",
        "screen appeared",
        "lamp switched off",
    ]
    assert shapes.changes(a, "Red ball top left, blue box bottom right, lamp on.") == []  # same state
    assert shapes.changes("empty .", "lamp on .") == ["lamp appeared, on"]
    assert shapes.changes("a rabbit .", "a bird .") == ["changed (not a world state)"]
    assert timeline(shapes, [a, a, b])[:2] == [[], []] and len(timeline(shapes, [a, a, b])[2]) == 5


def test_shapes_parses_into_fields_and_names_the_bad_word():
    shapes = get_domain("shapes")
    assert shapes.parse("Red ball top left, lamp on.") == {
        "objects": [{"colour": "red", "shape": "ball", "row": "top", "column": "left"}],
        "screen": False,
        "lamp": True,
    }
    assert parses(shapes, "red ball top left .") is True
    assert parses(shapes, "red bal top left .") is False
    assert "'bal'" in (parse_error(shapes, "red bal top left .") or "")
    assert shapes.spell("Red ball top left, lamp on.") == "red ball top left , lamp on ."
    frame = shapes.draw("red ball top left .", 64)
    assert frame is not None and frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    clips = shapes.sample_clips(0)
    assert [c.name for c in clips] == ["world-bounce", "world-gravity", "world-collide"]
    frames, states, stride = clips[0].frames, clips[0].states, clips[0].stride
    assert frames.shape[1:] == (128, 128, 3) and frames.shape[0] >= (len(states) - 1) * stride + 1
    assert all(parses(shapes, s) for c in clips for s in c.states)


def test_free_text_has_no_grammar_and_a_word_level_timeline():
    text = get_domain("text")
    assert text.parse("A man walks his dog.") is None and parses(text, "anything at all") is None
    assert parse_error(text, "!!") is None
    assert text.spell("  A man   walks.\n") == "A man walks."  # spelled as written, white space collapsed
    assert text.changes("A man walks his dog.", "a man walks his dog .") == []  # as the predictor reads them
    assert text.changes("a man walks his dog .", "a man runs with his dog .") == ["walks -> runs with"]
    assert text.changes("a man walks .", "a man walks . a car passes .") == ["added: a car passes ."]
    assert text.changes("a big red car .", "a car .") == ["removed: big red"]
    many = text.changes("a b c d e f g h i j", "a x c x e x g x i x")
    assert len(many) == 5 and many[-1] == "and 1 more changes"
    assert text.automaton(16) is None and text.mirror is None and text.sample_clips() == []
    assert text.draw("a dog .", 64) is None and text.confidence_threshold is None


def test_a_registered_domain_reaches_the_pipeline(tmp_path):
    """A domain registered at run time: the pipeline checks states with its parser, its timeline and warning."""
    from pipeline.world_model import WorldModelPipeline
    from tests.fakes import FlipStages, ToyDomain

    register_domain("toy", ToyDomain)
    assert "toy" in known_domains()
    stages = FlipStages()
    pipe = WorldModelPipeline(stages, stages, stages, domain="toy")
    assert pipe.domain.name == "toy" and pipe.confidence_threshold is None
    out = pipe(states=["up", "up"], horizon=2, render=False)
    assert out.domain == "toy" and out.predicted_states == ["down", "up"]
    assert out.changes == [[], [], ["flip"], ["flip"]]
    assert out.observed_parses == [True, True] and out.predicted_parses == [True, True]
    with pytest.raises(UserError, match=r"states\[1\]: 'sideways' is not up or down"):
        pipe(states=["up", "sideways"], horizon=1, render=False)
    (tmp_path / "model_index.json").write_text(json.dumps({"domain": "toy"}))
    assert domain_of_index(json.loads((tmp_path / "model_index.json").read_text())).name == "toy"


def test_the_cli_reaches_domains_through_the_registry(tmp_path, capsys):
    """`semworld domains` lists them; world generate/show, train all and eval world take --domain and refuse,
    in one line and before any work, a domain that lacks what the command needs."""
    from pipeline import cli

    assert cli.main(["domains"]) == 0
    listed = capsys.readouterr().out
    assert "shapes" in listed and "[grammar, projection, mirror, samples, generate]" in listed
    assert "text" in listed and "free text" in listed
    cases = [
        (
            ["world", "generate", "--domain", "text", "--clips", "1", "--out", str(tmp_path / "g")],
            "--domain text: the text domain records no data sets",
        ),
        (
            ["world", "show", "a dog .", "--domain", "text", "--out", str(tmp_path / "s.png")],
            "--domain text: the text domain cannot draw a state",
        ),
        (
            [
                "train",
                "all",
                "--domain",
                "text",
                "--out",
                str(tmp_path / "w"),
                "--run-dir",
                str(tmp_path / "r"),
            ],
            "--domain text: no recipe 'text-captioner' for its captioner",
        ),
        (["train", "all", "--domain", "atlantis", "--out", str(tmp_path / "w")], "unknown domain 'atlantis'"),
        (
            ["eval", "world", "--data", str(tmp_path), "--domain", "text"],
            "--domain text: eval world scores a data set with true states and frames",
        ),
    ]
    for argv, said in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err
    assert not (tmp_path / "w").exists() and not (tmp_path / "g").exists()  # nothing was started
    assert cli.main(["world", "show", "red ball top left .", "--out", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_train_all_names_the_domain_in_model_index(tmp_path):
    from pipeline.training.all import write_model_index

    (tmp_path / "predictor").mkdir()
    index = write_model_index(tmp_path)
    assert (
        index["domain"] == "shapes"
        and index["confidence_threshold"] == get_domain("shapes").confidence_threshold
    )
    assert domain_of_index(json.loads((tmp_path / "model_index.json").read_text())).name == "shapes"
    assert "confidence_threshold" not in write_model_index(tmp_path, "text")  # free text carries none
