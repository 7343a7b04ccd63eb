"""`semworld eval world`: each metric on tiny data, skipped stages, the copy-last reference, and the CLI."""

from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pytest

from pipeline.cli.eval import add_world_parser, write_report
from pipeline.evaluation.metrics import psnr, scene_groups, ssim
from pipeline.evaluation.world import (
    Clip,
    CopyLast,
    EvalWorldArgs,
    evaluate_world,
    read_world_dir,
    score_captioner,
    score_predictor,
    score_renderer,
    stage_folder,
)
from pipeline.utils import UserError

WORLD = ("bounce,fast", 2, 7)  # the clips of `world_dir`: two of 7 states each


class Oracle:
    """Knows the true continuation of every history in the data; writes it the way the predictor's tokenizer
    decodes ("left, lamp on."), which must count as the world's "left , lamp on ."."""

    def __init__(self, clips: list[Clip]) -> None:
        self.clips = clips

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        out = []
        for h in states:
            clip = next(c for c in self.clips if c.states[: len(h)] == h)
            rest = clip.states[len(h) :] + ["empty ."] * k
            out.append([s.replace(" ,", ",").replace(" .", ".") for s in rest[:k]])
        return out


def test_read_world_dir_finds_frames_and_flags(world_dir):
    clips = read_world_dir(world_dir)
    assert [c.scenario for c in clips] == ["bounce", "fast"]
    assert all(len(c.states) == 7 and c.predictable[:2] == [False, False] for c in clips)
    assert all((c.frames_dir / "06.png").is_file() for c in clips)


def test_read_world_dir_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        read_world_dir(tmp_path / "nope")
    with pytest.raises(UserError, match="no states.jsonl"):
        read_world_dir(tmp_path)
    (tmp_path / "states.jsonl").write_text('{"states": ["empty ."], "predictable": []}\n')
    with pytest.raises(UserError, match="1 states but 0 predictable flags"):
        read_world_dir(tmp_path)


def test_predictor_scores_by_horizon_on_predictable_steps_only(world_dir):
    clips = read_world_dir(world_dir)
    perfect = score_predictor(Oracle(clips), clips, horizon=3, min_history=4)
    assert perfect["by_horizon"] == {"1": 1.0, "2": 1.0, "3": 1.0}
    # 7 states, starts 4..6: horizon 1 has 3 targets per clip, horizon 3 only one (state 6).
    assert perfect["steps"] == {"1": 6, "2": 4, "3": 2} and perfect["rollouts"] == 6
    assert set(perfect["by_family"]) == {"physics"} and perfect["valid_h1"] == 1.0
    assert perfect["flagged_steps"] == perfect["steps"]  # states 2.. of these clips are all predictable
    assert perfect["by_family_flagged"] == perfect["by_family"]
    assert perfect["after_event_steps"] == {"1": 0, "2": 0, "3": 0}
    assert perfect["by_horizon_after_event"] == {"1": None, "2": None, "3": None}
    # Copy-last is right exactly where the true state repeats the one before (never, for moving objects).
    copy = score_predictor(CopyLast(), clips, horizon=3, min_history=4)
    expected = np.mean([c.states[t] == c.states[t - 1] for c in clips for t in range(4, 7)])
    assert copy["by_horizon"]["1"] == pytest.approx(expected, abs=1e-4)
    # An unpredictable step is never counted: flag everything unpredictable and nothing is scored.
    hidden = [Clip(c.index, c.states, [False] * 7, c.scenario, None) for c in clips]
    none = score_predictor(Oracle(hidden), hidden, horizon=2, min_history=4)
    assert none["by_horizon"] == {"1": None, "2": None} and none["unpredictable_steps"] == 6


def test_image_metrics():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert psnr(a, a) == float("inf") and ssim(a, a) == pytest.approx(1.0)
    b = np.clip(a.astype(int) + 10, 0, 255).astype(np.uint8)
    assert 25 < psnr(a, b) < 30.2 and ssim(a, b) < 1.0
    assert ssim(a, 255 - a) < 0.0  # anti-correlated


def test_captioner_and_renderer_with_the_world_itself(world_dir):
    """A captioner that reads frames perfectly scores 1; a renderer that draws the world's frames scores inf."""
    from world import render_state

    clips = read_world_dir(world_dir)
    truth = {render_state(s, 64).tobytes(): s for c in clips for s in c.states}

    class Reader:
        def caption(self, frames):
            return [truth.get(f.tobytes(), "empty .") for f in frames]

    class Painter:
        def render(self, states, generator=None, steps=None, guidance=None):
            return [render_state(s, 64) for s in states]

    cap = score_captioner(Reader(), clips)
    assert cap["exact_match"] == 1.0 and cap["frames"] == 14
    ren = score_renderer(Painter(), clips, Reader(), max_states=5)
    assert ren["states"] == 5 and ren["psnr"] == float("inf") and ren["roundtrip_acc"] == 1.0
    assert "skipped" in score_renderer(Painter(), clips, None, max_states=2)["roundtrip"]
    assert set(ren["roundtrip_by_scene"].values()) == {1.0} and sum(
        n for k, n in ren["states_by_scene"].items() if k.startswith("objects=")) == 5  # fmt: skip


def test_round_trip_is_reported_by_object_count_screen_and_lamp():
    states = ["empty .", "red ball top left , screen .", "red ball top left , blue box top right .",
              "blue box top right , lamp on .", "screen ball ."]  # fmt: skip
    groups = scene_groups(states)
    assert groups == {"objects=0": [0], "objects=1": [1, 3], "objects=2": [2], "invalid": [4], "lamp on": [3],
                      "no lamp": [0, 1, 2], "no screen": [0, 2, 3], "screen": [1]}  # fmt: skip
    assert list(groups)[:3] == ["objects=0", "objects=1", "objects=2"]

    class Painter:  # draws the two-object state as an empty room, every other one right
        def render(self, todo, generator=None, steps=None, guidance=None):
            from world import render_state

            return [render_state("empty ." if s == states[2] else s, 64) for s in todo]

    class Reader:
        def caption(self, frames):
            from world import render_state

            known = {render_state(s, 64).tobytes(): s for s in states[:4]}
            return [known.get(f.tobytes(), "empty .") for f in frames]

    clips = [Clip(0, states[:4], [True] * 4, "bounce", None)]
    ren = score_renderer(Painter(), clips, Reader(), max_states=4)
    assert ren["roundtrip_by_scene"] == {"objects=0": 1.0, "objects=1": 1.0, "objects=2": 0.0, "lamp on": 1.0,
                                         "no lamp": 0.6667, "no screen": 0.6667, "screen": 1.0}  # fmt: skip
    assert ren["psnr_by_scene"]["objects=1"] == float("inf") and ren["psnr_by_scene"]["objects=2"] < 40


def test_missing_stages_are_skipped_with_a_note(world_dir, tmp_path):
    result = evaluate_world(EvalWorldArgs(data=str(world_dir), weights=str(tmp_path), device="cpu"))
    for part in ("captioner", "predictor", "renderer"):
        assert result[part]["skipped"].startswith(f"no {part} weights in {tmp_path}")
    with pytest.raises(UserError, match="--parts: unknown bogus"):
        EvalWorldArgs(data=str(world_dir), parts=("bogus",))


def test_stage_folder_follows_model_index(tmp_path):
    (tmp_path / "predictor").mkdir()
    (tmp_path / "p2").mkdir()
    assert stage_folder(tmp_path, "predictor") == tmp_path / "predictor"  # no index: the stage's name
    (tmp_path / "model_index.json").write_text(json.dumps({"predictor": "p2", "captioner": ["x", "Y"]}))
    assert stage_folder(tmp_path, "predictor") == tmp_path / "p2"
    assert stage_folder(tmp_path, "captioner") is None  # [library, class] -> captioner/, which is missing
    assert stage_folder(tmp_path, "renderer") is None


def test_real_tiny_stages_end_to_end_through_the_cli(world_dir, tiny_weights, tmp_path, capsys):
    """Random tiny BLIP, 4-tensor and SD-layout stages load and every part reports numbers in range."""
    weights = tmp_path / "w"
    shutil.copytree(tiny_weights, weights)
    parser = argparse.ArgumentParser()
    add_world_parser(parser.add_subparsers())
    base = ["world", "--data", str(world_dir), "--weights", str(weights), "--json", "--device", "cpu"]
    ns = parser.parse_args([*base, "--render-states", "2", "--horizon", "2", "--max-frames", "4"])
    assert ns.func(ns) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["captioner"]["frames"] == 4 and 0.0 <= result["captioner"]["exact_match"] <= 1.0
    pred = result["predictor"]
    assert pred["model"] == "four_tensor" and set(pred["by_horizon"]) == {"1", "2"}
    assert pred["steps"]["1"] == 6 and result["copy_last"]["steps"] == pred["steps"]
    ren = result["renderer"]
    assert ren["states"] == 2 and 0.0 < ren["psnr"] < 60 and 0.0 <= ren["roundtrip_acc"] <= 1.0
    # Without the renderer folder, that part is skipped and the others still run.
    shutil.rmtree(weights / "renderer")
    ns = parser.parse_args([*base, "--parts", "renderer"])
    assert ns.func(ns) == 0
    result = json.loads(capsys.readouterr().out)
    assert "skipped" in result["renderer"] and "predictor" not in result


def test_train_all_quick_predictor_resumes_and_writes_the_index(tmp_path, monkeypatch):
    """`semworld train all --quick --stages predictor`: weights in the shipped layout, an index naming them, and a
    second run that finds the stage built and leaves it alone."""
    from pipeline.predictor import Predictor
    from pipeline.training import all as ta

    args = ta.TrainAllArgs(
        out=str(tmp_path / "w"),
        run_dir=str(tmp_path / "r"),
        stages=("predictor",),
        quick=True,
        progress=False,
        device="cpu",
    )
    report = ta.train_all(args)
    folder = tmp_path / "w" / "predictor"
    assert sorted(p.name for p in folder.iterdir()) == sorted(ta.PREDICTOR_FILES)
    assert report["model_index"]["predictor"] == ["semworld", "FourTensorModel"]
    index = json.loads((tmp_path / "w" / "model_index.json").read_text())
    assert index["captioner"] == ["transformers", "BlipForConditionalGeneration"]  # expected, not built here
    assert Predictor.from_pretrained(folder, device="cpu").predict([["red ball top left ."]], 1)
    monkeypatch.setattr(ta, "build_predictor", lambda *a: pytest.fail("a built stage was rebuilt"))
    assert ta.train_all(args)["predictor"]["epochs_run"] == 1
    assert list(report["predictor"]["phases"]) == [
        "quick-predictor-base"
    ]  # the fine-tune trained its base first
    assert report["predictor"]["args"]["init_from"] == str(
        tmp_path / "r" / "predictor" / "quick-predictor-base" / "model"
    )
    with pytest.raises(UserError, match="--stages: unknown painter"):
        ta.TrainAllArgs(stages=("painter",))


def test_train_all_quick_renderer_fine_tunes_its_base_and_ships_the_best(tmp_path):
    """The renderer stage of `semworld train all --quick`: phase 1 from scratch into run/base, phase 2 from its
    saved folder (no VAE stage), and the fine-tune's best-evaluated folder shipped as weights/renderer."""
    from pipeline.renderer import Renderer
    from pipeline.training import all as ta

    args = ta.TrainAllArgs(out=str(tmp_path / "w"), run_dir=str(tmp_path / "r"), stages=("renderer",), quick=True,
                           progress=False)  # fmt: skip
    report = ta.train_all(args)["renderer"]
    run = tmp_path / "r" / "renderer"
    assert list(report["phases"]) == ["quick-renderer-base"]
    assert report["args"]["init_from"] == str(run / "base" / "pipeline")  # phase 1 has no periodic evaluation
    tuned = [json.loads(line)["stage"] for line in (run / "finetune" / "log.jsonl").read_text().splitlines()]
    assert "vae" not in tuned and (run / "finetune" / "best").is_dir()
    shipped = json.loads((tmp_path / "w" / "renderer" / "metrics.json").read_text())
    assert shipped == json.loads((run / "finetune" / "best" / "metrics.json").read_text())
    assert Renderer.from_pretrained(tmp_path / "w" / "renderer", device="cpu").size == (32, 32)


def test_eval_world_projects_for_world_weights_unless_told_not_to(world_dir, tiny_weights, tmp_path):
    """An index with "grammar": "world": every predicted state is valid (the tiny random predictor's raw ones
    are not) and the share changed is reported; --no-project scores the raw states; no grammar, no projection."""
    weights = tmp_path / "w"
    shutil.copytree(tiny_weights, weights)
    plain = evaluate_world(EvalWorldArgs(data=str(world_dir), weights=str(weights), parts=("predictor",),
                                         horizon=2, device="cpu"))["predictor"]  # fmt: skip
    assert plain["projection"] is False and "projected" not in plain
    index = json.loads((weights / "model_index.json").read_text())
    (weights / "model_index.json").write_text(json.dumps({**index, "grammar": "world"}))
    parser = argparse.ArgumentParser()
    add_world_parser(parser.add_subparsers())
    results = {}
    for flag in ([], ["--no-project"]):
        ns = parser.parse_args(["world", "--data", str(world_dir), "--weights", str(weights), "--parts",
                                "predictor", "--horizon", "2", "--device", "cpu", "--json", *flag])  # fmt: skip
        results[bool(flag)] = evaluate_world(EvalWorldArgs(
            data=ns.data, weights=ns.weights, parts=("predictor",), horizon=ns.horizon, device=ns.device,
            project=ns.project))["predictor"]  # fmt: skip
    on, off = results[False], results[True]
    assert (
        on["projection"] is True and on["valid_h1"] == 1.0 and on["valid_by_horizon"] == {"1": 1.0, "2": 1.0}
    )
    assert on["projected"] > 0.5  # a random predictor's argmax states almost never parse
    assert off["projection"] is False and off == {**plain, "seconds": off["seconds"]}
    assert off["valid_h1"] < 0.5


def test_eval_world_mirror_scores_the_mirror_averaged_predictor_and_refuses_weights_without_one(
    world_dir, tiny_weights, tmp_path, monkeypatch, capsys
):
    """--mirror reaches the predictor: every rollout step is the mirror average; weights whose index names no
    grammar have no known mirror: one line, no traceback."""
    from pipeline.symmetry import MirrorAveraged

    rows: list[int] = []
    averaged = MirrorAveraged.next_logits
    monkeypatch.setattr(
        MirrorAveraged,
        "next_logits",
        lambda self, ids, *a, **kw: rows.append(ids.shape[0]) or averaged(self, ids, *a, **kw),
    )
    weights = tmp_path / "w"
    shutil.copytree(tiny_weights, weights)
    with pytest.raises(UserError, match="mirror averaging needs"):
        evaluate_world(EvalWorldArgs(data=str(world_dir), weights=str(weights), parts=("predictor",), horizon=2,
                                     device="cpu", mirror=True))  # fmt: skip
    index = json.loads((weights / "model_index.json").read_text())
    (weights / "model_index.json").write_text(json.dumps({**index, "grammar": "world"}))
    parser = argparse.ArgumentParser()
    add_world_parser(parser.add_subparsers())
    ns = parser.parse_args(["world", "--data", str(world_dir), "--weights", str(weights), "--mirror"])
    runs = {m: evaluate_world(EvalWorldArgs(data=str(world_dir), weights=str(weights), parts=("predictor",),
                                            horizon=2, device="cpu", project=False, mirror=m))["predictor"]
            for m in (False, ns.mirror)}  # fmt: skip
    assert runs[True]["mirror"] is True and runs[False]["mirror"] is False
    assert runs[True]["rollouts"] == runs[False]["rollouts"]
    # each rollout: 2 steps of the averaged model, none without --mirror
    assert sum(rows) == 2 * runs[True]["rollouts"]
    from pipeline import cli

    capsys.readouterr()
    assert (
        cli.main(
            [
                "eval",
                "world",
                "--data",
                str(world_dir),
                "--weights",
                str(weights),
                "--parts",
                "predictor",
                "--horizon",
                "2",
                "--device",
                "cpu",
                "--mirror",
            ]
        )
        == 0
    )
    assert "averaged with its left-right mirror" in " ".join(capsys.readouterr().out.split())


def test_eval_world_rolls_out_from_min_history_states_by_default_the_window_at_most_4(
    world_dir, tiny_weights
):
    from pipeline.cli.eval import run_eval_world

    def rollouts(**kw: int) -> dict:
        return evaluate_world(EvalWorldArgs(data=str(world_dir), weights=str(tiny_weights), parts=("predictor",),
                                            horizon=1, device="cpu", **kw))["predictor"]  # fmt: skip

    T = json.loads((tiny_weights / "predictor" / "config.json").read_text())["T"]
    clips = read_world_dir(world_dir)
    default, two = rollouts(), rollouts(min_history=2)
    assert (
        T <= 4
        and default["min_history"] == T
        and default["rollouts"] == sum(len(c.states) - T for c in clips)
    )
    assert two["min_history"] == 2 and two["rollouts"] == sum(len(c.states) - 2 for c in clips)
    with pytest.raises(UserError, match="--min-history must be >= 1"):
        rollouts(min_history=0)
    parser = argparse.ArgumentParser()
    add_world_parser(parser.add_subparsers())
    ns = parser.parse_args(["world", "--data", str(world_dir), "--weights", str(tiny_weights), "--parts",
                            "predictor", "--min-history", "2", "--device", "cpu"])  # fmt: skip
    assert ns.min_history == 2 and ns.func is run_eval_world


def test_targets_after_a_random_event_are_split_from_the_chain(world_dir):
    """A step flagged unpredictable inside a rollout (an appearance) makes every later target of that rollout an
    after-event target: out of the headline (`by_horizon`, families), kept in the flagged rows, whatever the
    predictor gets right."""
    clips = read_world_dir(world_dir)
    flags = [False, False, True, True, True, False, True]  # state 5: something appeared; state 6 follows it
    marked = [Clip(c.index, c.states, flags, c.scenario, None) for c in clips]
    res = score_predictor(Oracle(marked), marked, horizon=3, min_history=4)
    # starts 4, 5, 6: h = 1 targets 4 (chain), 6 (start 6: chain, its own first step is predictable), 5 skipped;
    # h = 2 targets 5 (skipped), 6 from start 5 (after the event at 5); h = 3 target 6 from start 4 (after 5)
    assert res["flagged_steps"] == {"1": 4, "2": 2, "3": 2}
    assert res["steps"] == {"1": 4, "2": 0, "3": 0}  # the determined targets: the headline
    assert res["after_event_steps"] == {"1": 0, "2": 2, "3": 2}
    assert res["by_horizon_after_event"]["3"] == 1.0 and res["by_horizon_flagged"]["3"] == 1.0
    assert res["by_horizon"] == {"1": 1.0, "2": None, "3": None}
    assert res["family_steps"]["physics"] == res["steps"]


def test_a_wrong_guess_after_a_random_event_counts_only_in_the_flagged_rows(world_dir, capsys):
    """The headline is what the history determines: an oracle that gets every after-event target wrong keeps
    100% there, and loses exactly those targets on `by_horizon_flagged`; the report prints both."""
    clips = read_world_dir(world_dir)
    flags = [False, False, True, True, True, False, True]
    marked = [Clip(c.index, c.states, flags, c.scenario, None) for c in clips]

    class WrongAfterEvent(Oracle):
        def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
            out = super().predict(states, k)
            # a rollout from 5 states reaches state 6 after the event at 5; from 4, states 5 and 6
            return [f[:1] + ["empty ."] * (k - 1) if len(h) in (4, 5) else f for h, f in zip(states, out)]

    res = score_predictor(WrongAfterEvent(marked), marked, horizon=3, min_history=4)
    assert res["by_horizon"]["1"] == 1.0 and res["by_family"]["physics"]["1"] == 1.0
    assert res["by_horizon_after_event"] == {"1": None, "2": 0.0, "3": 0.0}
    assert res["by_horizon_flagged"] == {"1": 1.0, "2": 0.0, "3": 0.0}
    write_report(
        {
            "data": "d",
            "clips": 2,
            "states": 14,
            "weights": "w",
            "predictor": {"model": "oracle", "projection": False, **res},
            "copy_last": res,
        }
    )
    text = capsys.readouterr().out
    assert "after event" in text and "all flagged" in text


def test_the_captioner_is_scored_on_mp4_frames_where_the_data_has_no_pngs(tmp_path):
    """An Atari data set has clips and states.jsonl but no frames/: state k is read from frame k * stride of the
    clip's MP4, and a domain other than the built-in world gets its score by field."""
    from pipeline.domain import get_domain
    from pipeline.video import encode_mp4

    # six flat grey frames (64, 64, 3), their levels far apart so that H.264 keeps them apart
    levels = [0, 50, 100, 150, 200, 250]
    frames = [np.full((64, 64, 3), v, np.uint8) for v in levels]
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "000000.mp4").write_bytes(encode_mp4(frames, 15.0))
    # every other frame; the first with a ball in play, which its black frame cannot show (Pong.unshown)
    states = [f"ball {'9 9' if v == 0 else 'none'} player {v // 10} enemy 3 score 0 1 ." for v in levels[::2]]
    record = {"clip": "clips/000000.mp4", "stride": 2, "states": states}
    (tmp_path / "states.jsonl").write_text(json.dumps(record) + "\n")

    class Reader:  # reads the frame's grey level back into the player's place; misreads the last frame's enemy
        def caption(self, frames):
            levels = [int(round(f.mean() / 50) * 50) for f in frames]
            return [f"ball none player {v // 10} enemy {3 + (v == 200)} score 0 1 ." for v in levels]

    clips = read_world_dir(tmp_path)
    assert clips[0].frames_dir is None and clips[0].stride == 2
    scored = score_captioner(Reader(), clips, domain=get_domain("pong"))
    assert scored["frames"] == 3 and scored["exact_match"] == round(1 / 3, 4)
    assert scored["by_field"]["player"] == 1.0 and scored["by_field"]["enemy"] == round(2 / 3, 4)
    assert scored["exact_match_shown"] == 0.5 and scored["unshown_share"] == round(1 / 3, 4)
    assert "by_objects" not in scored
    shutil.rmtree(tmp_path / "clips")
    assert (
        "neither PNG frames nor MP4 clips" in score_captioner(Reader(), read_world_dir(tmp_path))["skipped"]
    )
