"""Every registered recipe of models.presets builds its training arguments and its network."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from models.captioner import build_blip
from models.four_tensor import FourTensorModel
from models.presets import RECIPES, STAGES, Recipe, four_tensor_config, get_recipe
from models.renderer import RendererConfig, build_pipeline
from pipeline.training.args import TrainArgs, args_from_recipe
from pipeline.training.captioner import build_tokenizer, world_sentences
from pipeline.training.image_args import TrainCaptionerArgs, TrainRendererArgs
from pipeline.training.renderer_parts import build_tokenizer as renderer_tokenizer

RUN = {
    "captioner": {"out": "o", "run_dir": "r"},
    "renderer": {"out": "r"},
    "predictor": {"data": "d.jsonl", "out": "o"},
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_builds_its_arguments_and_network(name):
    recipe = get_recipe(name)
    run = RUN[recipe.stage] | (
        {"init_from": "base"} if recipe.init_from and recipe.stage == "predictor" else {}
    )
    args = args_from_recipe(recipe, **run)  # a fine-tune runs from its base's folder (--grow-layer needs one)
    for key, value in recipe.train.items():  # the recipe's departures from the defaults reach the arguments
        got = getattr(args, key)
        if key == "memory":  # the knobs of TensorMemoryConfig the recipe sets
            got = {knob: getattr(got, knob) for knob in value}
        assert got == value, key
    torch.manual_seed(0)
    if recipe.stage == "captioner":
        assert isinstance(args, TrainCaptionerArgs) and args.model == recipe.model
        model = build_blip(args.model, build_tokenizer(world_sentences()))
        n = sum(p.numel() for p in model.parameters())
    elif recipe.stage == "renderer":
        assert isinstance(args, TrainRendererArgs) and args.model_config() == recipe.model
        pipe = build_pipeline(args.model_config(), renderer_tokenizer(args.max_length))
        n = sum(p.numel() for m in (pipe.vae, pipe.unet, pipe.text_encoder) for p in m.parameters())
        assert pipe.unet.config.sample_size == args.model_config().latent_size
    else:
        assert isinstance(args, TrainArgs) and args.preset == recipe.model
        with torch.device("meta"):
            model = FourTensorModel(four_tensor_config(args.preset))
        n = sum(p.numel() for p in model.parameters())
    assert 1_000 < n < 40_000_000  # every shipped network fits the 40 MB weights budget in float16


def test_the_shipped_recipes_cover_every_stage_and_the_finetune_names_its_base():
    assert {RECIPES[s].stage for s in STAGES} == set(STAGES)
    assert {RECIPES[f"quick-{s}"].stage for s in STAGES} == set(STAGES)
    assert get_recipe("captioner").init_from == "captioner-base"
    assert get_recipe("predictor").init_from == "predictor-10"
    assert get_recipe("predictor-10").init_from == "predictor-9"
    assert get_recipe("predictor-9").init_from == "predictor-8"
    assert get_recipe("quick-predictor").init_from == "quick-predictor-base"
    assert get_recipe("renderer").init_from == "renderer-4"
    assert get_recipe("renderer-4").init_from == "renderer-3"
    assert get_recipe("renderer-3").init_from == "renderer-2"
    assert get_recipe("renderer-2").init_from == "renderer-base"
    assert get_recipe("quick-renderer").init_from == "quick-renderer-base"
    assert (
        get_recipe("renderer").model == get_recipe("renderer-base").model == RendererConfig()
    )  # the defaults
    with pytest.raises(ValueError, match="unknown recipe 'nope'"):
        get_recipe("nope")
    with pytest.raises(ValueError, match="a renderer recipe's model is a RendererConfig"):
        Recipe("bad", "renderer", "", "small")


def test_predictor_data_writes_every_scenario_then_the_mix_in_order(tmp_path):
    import json

    from pipeline.training.all import predictor_data
    from world import sequences

    recipe = Recipe(
        "t",
        "predictor",
        "",
        "tiny",
        {},
        {"clips": 8, "length": 6, "seed_offset": 2},
        mix=(("memory", 3, 1), ("collide", 2, 0), ("hide", 2, 3, 9)),
    )
    path = predictor_data(tmp_path / "train.jsonl", 5, recipe)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    want = (
        sequences("all", 8, 7, 6, "train")
        + sequences("memory", 3, 6, 6, "train")
        + sequences("collide", 2, 5, 6, "train")
        + sequences("hide", 2, 8, 9, "train")
    )  # a part with its own length
    assert records == json.loads(json.dumps(want))
    assert [len(r["states"]) for r in records[-3:]] == [6, 9, 9]


def test_a_recording_domains_data_is_played_by_the_recipes_policy(tmp_path):
    import json

    pytest.importorskip("ale_py")
    from pipeline.training.all import predictor_data

    def actions(policy: str | None) -> list[list[str]]:
        data = {"clips": 3, "length": 40, "warmup": 0} | ({"policy": policy} if policy else {})
        path = predictor_data(
            tmp_path / f"{policy}.jsonl", 0, Recipe("t", "predictor", "", "tiny", {}, data), "freeway"
        )
        return [json.loads(line)["actions"] for line in path.read_text().splitlines()]

    assert actions(None) == actions("mix") != actions("runs")


def test_a_bad_mix_is_refused_by_name():
    with pytest.raises(ValueError, match="mix part"):
        Recipe("bad", "predictor", "", "tiny", mix=(("memory", 0, 0),))
    with pytest.raises(ValueError, match="length >= 2"):
        Recipe("bad", "predictor", "", "tiny", mix=(("memory", 3, 0, 1),))
    with pytest.raises(ValueError, match="only a predictor recipe"):
        Recipe("bad", "renderer", "", RendererConfig(), mix=(("memory", 3, 0),))


def test_the_predictor_recipe_is_the_run_that_made_the_shipped_predictor():
    import json
    from pathlib import Path

    from pipeline.training.all import recipe_chain

    summary = json.loads(
        (Path(__file__).resolve().parents[3] / "weights" / "predictor" / "training_summary.json").read_text()
    )["args"]  # in the flat format (memory a bool beside its knobs), which from_dict reads too
    shipped = TrainArgs.from_dict(summary)
    recipe = get_recipe("predictor")
    assert recipe.init_from == "predictor-10" and shipped.init_from is not None
    run = {k: v for k, v in asdict(shipped).items() if k not in recipe.train and k != "preset"}
    assert args_from_recipe(recipe, **run) == shipped  # every field, each memory knob included
    assert TrainArgs.from_dict(asdict(shipped)) == shipped  # and the format asdict writes now
    assert [r.name for r in recipe_chain(recipe)] == [
        "predictor-base",
        "predictor-2",
        "predictor-3",
        "predictor-4",
        "predictor-5",
        "predictor-6",
        "predictor-7",
        "predictor-8",
        "predictor-9",
        "predictor-10",
        "predictor",
    ]
    base = get_recipe("predictor-base")
    assert base.train["memory"] and base.mix == (("memory", 1500, 0),)


def test_the_pong_predictor_recipe_is_the_run_that_made_the_shipped_pong_predictor():
    """Every training argument the recipe sets is the shipped run's (its summary), and its chain is the nine
    phases in order, the last two one epoch each of fresh clips at 1e-4 (seed + 5, seed + 6)."""
    import json

    from pipeline.training.all import recipe_chain

    weights = Path(__file__).resolve().parents[3] / "weights" / "pong" / "predictor"
    shipped = TrainArgs.from_dict(json.loads((weights / "training_summary.json").read_text())["args"])
    recipe = get_recipe("pong-predictor")
    run = {k: v for k, v in asdict(shipped).items() if k not in recipe.train and k != "preset"}
    assert args_from_recipe(recipe, **run) == shipped
    chain = recipe_chain(recipe)
    assert [r.name for r in chain][-3:] == ["pong-predictor-7", "pong-predictor-8", "pong-predictor"]
    assert len(chain) == 9 and [r.data["seed_offset"] for r in chain[-2:]] == [5, 6]


def test_the_freeway_renderer_is_five_phases_the_last_two_on_fresh_clips_of_drawn_scores():
    from pipeline.training.all import recipe_chain

    chain = recipe_chain(get_recipe("freeway-renderer"))
    assert [r.name for r in chain] == [
        "freeway-renderer-base",
        "freeway-renderer-2",
        "freeway-renderer-3",
        "freeway-renderer-4",
        "freeway-renderer",
    ]
    assert [r.seed_offset for r in chain] == [0, 1, 2, 3, 4]  # every phase records fresh clips
    assert [r.train.get("refit_vae", False) for r in chain] == [False, False, True, False, False]
    assert all(r.train["clip_score_max"] == 39 for r in chain[1:])


def test_a_fine_tune_is_trained_from_its_whole_chain_of_recipes(monkeypatch):
    from pipeline.training import all as ta

    assert [r.name for r in ta.recipe_chain(get_recipe("quick-predictor"))] == ["quick-predictor-base",
                                                                               "quick-predictor"]  # fmt: skip
    a = Recipe("a", "predictor", "", "tiny", init_from="c")
    b = Recipe("b", "predictor", "", "tiny", init_from="a")
    c = Recipe("c", "predictor", "", "tiny", init_from="b")
    monkeypatch.setattr(ta, "get_recipe", {"a": a, "b": b, "c": c}.__getitem__)
    with pytest.raises(ValueError, match="init_from goes round in a circle"):
        ta.recipe_chain(c)
    root = Recipe("root", "predictor", "", "tiny")
    monkeypatch.setattr(ta, "get_recipe", {"root": root, "a": Recipe("a", "predictor", "", "tiny", init_from="root"),
                                           "b": b}.__getitem__)  # fmt: skip
    assert [r.name for r in ta.recipe_chain(b)] == ["root", "a", "b"]


def test_a_renderer_chain_trains_every_phase_in_order_each_from_the_last_shipped_folder(
    monkeypatch, tmp_path, caplog
):
    import pipeline.training.renderer as tr
    from pipeline.training import all as ta

    quick = get_recipe("quick-renderer")
    r0 = Recipe("r0", "renderer", "", quick.model, quick.train)
    r1 = Recipe("r1", "renderer", "", quick.model, quick.train, init_from="r0")
    r2 = Recipe("r2", "renderer", "", quick.model, quick.train, init_from="r1")
    monkeypatch.setattr(ta, "get_recipe", {"r0": r0, "r1": r1, "r2": r2}.__getitem__)
    monkeypatch.setattr(ta, "_recipe", lambda args, stage: r2)
    calls: list[tuple[str, str | None]] = []
    bars: list[bool] = []

    def fake_train(args):  # a trained run: its best/ folder holds one file
        calls.append((args.out, args.init_from))
        bars.append(args.progress)
        (Path(args.out) / tr.BEST_FOLDER).mkdir(parents=True)
        (Path(args.out) / tr.BEST_FOLDER / "made_by").write_text(args.out)
        return {"roundtrip_acc": 1.0}

    monkeypatch.setattr(tr, "train_renderer", fake_train)
    run, out = tmp_path / "run", tmp_path / "w" / "renderer"
    with caplog.at_level(logging.WARNING, logger=ta.__name__):
        report = ta.build_renderer(ta.TrainAllArgs(out=str(tmp_path / "w"), progress=False), run, out, None)
    assert "chosen by frame accuracy" in caplog.text  # no captioner: the user is told what best/ means then
    assert calls == [
        (str(run / "base"), None),
        (str(run / "r1"), str(run / "base" / "best")),
        (str(run / "finetune"), str(run / "r1" / "best")),
    ]
    assert list(report["phases"]) == ["r0", "r1"] and report["recipe"] == "r2"
    assert bars == [False, False, False]  # `train all --no-progress` reaches every phase's bars
    assert (out / "made_by").read_text() == str(run / "finetune")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=ta.__name__):
        ta.build_renderer(
            ta.TrainAllArgs(out=str(tmp_path / "w"), progress=False),
            tmp_path / "run2",
            tmp_path / "w2" / "renderer",
            tmp_path / "w" / "captioner",
        )
    assert caplog.text == ""


def test_a_recipe_seed_offset_moves_the_run_seed_and_defaults_to_zero():
    from pipeline.training.args import args_from_recipe

    shifted = args_from_recipe(get_recipe("renderer-4"), out="x", seed=5)
    assert get_recipe("renderer-4").seed_offset == 1 and shifted.seed == 6
    assert (
        args_from_recipe(get_recipe("renderer"), out="x", seed=0).seed == 2
    )  # phase 5: the pool of --seed 2
    assert args_from_recipe(get_recipe("renderer-3"), out="x", seed=5).seed == 5
    quick = get_recipe("quick-predictor")
    assert quick.seed_offset == 0 and args_from_recipe(quick, data="d", out="x", seed=5).seed == 5


def test_train_all_hands_its_progress_switch_to_both_captioner_phases(monkeypatch, tmp_path):
    import pipeline.training.captioner as tc
    from pipeline.training import all as ta

    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(tc, "train_captioner", lambda args: seen.append((args.out, args.progress)) or {})
    monkeypatch.setattr(ta, "_replace_dir", lambda *a, **k: None)
    ta.build_captioner(
        ta.TrainAllArgs(out=str(tmp_path / "w"), progress=False),
        tmp_path / "run",
        tmp_path / "w" / "captioner",
    )
    assert [p for _, p in seen] == [False, False] and len(seen) == 2


def test_train_all_builds_a_three_phase_captioner_chain_each_from_the_one_before(monkeypatch, tmp_path):
    """A captioner recipe two fine-tunes deep (Freeway's shipped one: its third phase is on drawn scores): the first
    phase in run/base, the second in run/<its name>, the recipe itself in run/finetune, each started from the folder
    the one before saved."""
    import pipeline.training.captioner as tc
    from pipeline.training import all as ta

    seen: list[tuple[str, str | None, str, int]] = []
    monkeypatch.setattr(
        tc, "train_captioner", lambda a: seen.append((a.run_dir, a.init_from, a.out, a.seed)) or {}
    )
    run, out = tmp_path / "run", tmp_path / "w" / "captioner"
    built = ta.build_captioner(
        ta.TrainAllArgs(out=str(tmp_path / "w"), domain="freeway", progress=False), run, out
    )
    assert seen == [
        (str(run / "base"), None, str(run / "base" / "model"), 0),
        (
            str(run / "freeway-captioner-2"),
            str(run / "base" / "model"),
            str(run / "freeway-captioner-2" / "model"),
            1,
        ),
        (str(run / "finetune"), str(run / "freeway-captioner-2" / "model"), str(out), 2),
    ]
    assert built["recipe"] == "freeway-captioner" and list(built["phases"]) == [
        "freeway-captioner-base",
        "freeway-captioner-2",
    ]
