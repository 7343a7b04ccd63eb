"""`semworld train all` / `make weights`: rebuild every shipped model from scratch, seeded, into one weights folder.

Owns the order of the stages (captioner, then the renderer that reads its frames back with it, then the
predictor), copying each stage's final files into `out/<stage>/`, and `model_index.json`. What each stage trains
is its recipe in models.presets (RECIPES["captioner"], ["renderer"], ["predictor"]; with --quick the "quick-*"
ones). Each stage resumes from its run directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from models.presets import STAGES, Recipe, get_recipe
from pipeline.domain import ALIASES, get_domain
from pipeline.training.args import TrainAllArgs, TrainArgs, args_from_recipe
from pipeline.utils import MODEL_INDEX, UserError, atomic_dir, atomic_write_json, atomic_write_text

logger = logging.getLogger(__name__)

DONE_FILE = "done.json"  # in a stage's run directory once its weights are in place
MAX_TOTAL_MB = 40.0
PREDICTOR_FILES = ("config.json", "model.safetensors", "tokenizer.json", "training_summary.json")


def _replace_dir(src: Path, dst: Path, files: tuple[str, ...] | None = None) -> None:
    """Copy src (or the named files of it) to dst through a scratch folder, then swap it in."""
    with atomic_dir(dst) as tmp:
        for name in files if files is not None else sorted(p.name for p in src.iterdir()):
            if (src / name).is_dir():
                shutil.copytree(src / name, tmp / name)
            elif (src / name).is_file():
                shutil.copy2(src / name, tmp / name)


# ---- the stages ----------------------------------------------------------------------------------------
def recipe_name(domain: str, stage: str, quick: bool = False) -> str:
    """The recipe of a stage in RECIPES: "<stage>" for the built-in shapes world, "<domain>-<stage>" for another
    domain; "quick-" before it for --quick."""
    name = stage if ALIASES.get(domain, domain) == "shapes" else f"{domain}-{stage}"
    return f"quick-{name}" if quick else name


def _recipe(args: TrainAllArgs, stage: str) -> Recipe:
    return get_recipe(recipe_name(args.domain, stage, args.quick))


def build_captioner(args: TrainAllArgs, run: Path, out: Path) -> dict[str, Any]:
    """The captioner recipe into `out`. A recipe that fine-tunes another trains its chain of bases first (the
    first in run/base, later ones in run/<recipe name>), each started from the one before; the recipe itself
    trains in run/finetune."""
    from pipeline.training.captioner import train_captioner

    *bases, recipe = recipe_chain(_recipe(args, "captioner"))
    common = {"seed": args.seed, "threads": args.threads, "progress": args.progress, "domain": args.domain}
    phases: dict[str, Any] = {}
    init_from = None
    for i, base_recipe in enumerate(bases):
        folder = run / ("base" if i == 0 else base_recipe.name)
        base = args_from_recipe(
            base_recipe, out=str(folder / "model"), run_dir=str(folder), init_from=init_from, **common
        )
        phases[base_recipe.name] = {"args": dataclasses.asdict(base), "metrics": train_captioner(base)}  # type: ignore[arg-type]
        init_from = base.out
    targs = args_from_recipe(
        recipe,
        out=str(out),
        run_dir=str(run / "finetune" if init_from else run),
        init_from=init_from,
        **common,
    )
    metrics = train_captioner(targs)  # type: ignore[arg-type]
    return {"recipe": recipe.name, "args": dataclasses.asdict(targs), "metrics": metrics, "phases": phases}


def build_renderer(args: TrainAllArgs, run: Path, out: Path, captioner: Path | None) -> dict[str, Any]:
    """The renderer recipe; ships the run's best-evaluated folder (the final one when none was evaluated). A
    recipe that fine-tunes another trains its chain of bases first (the first in run/base, later ones in
    run/<recipe name>), each started from the shipped folder of the one before; the recipe itself trains in
    run/finetune."""
    from pipeline.training.renderer import BEST_FOLDER, FINAL_FOLDER, train_renderer

    def shipped(folder: Path) -> Path:
        return folder / BEST_FOLDER if (folder / BEST_FOLDER).is_dir() else folder / FINAL_FOLDER

    *bases, recipe = recipe_chain(_recipe(args, "renderer"))
    if captioner is None:
        logger.warning(
            "renderer: no captioner in %s, so each phase's best/ is chosen by frame accuracy, not by the "
            "round trip the shipped renderers were chosen by; build the captioner stage first or copy "
            "one there",
            out.parent / "captioner",
        )
    common = {
        "seed": args.seed,
        "threads": args.threads,
        "progress": args.progress,
        "captioner": str(captioner) if captioner is not None else None,
        "domain": args.domain,
    }
    phases: dict[str, Any] = {}
    init_from = None
    for i, base_recipe in enumerate(bases):
        folder = run / ("base" if i == 0 else base_recipe.name)
        base = args_from_recipe(base_recipe, out=str(folder), init_from=init_from, **common)
        phases[base_recipe.name] = {"args": dataclasses.asdict(base), "metrics": train_renderer(base)}  # type: ignore[arg-type]
        init_from = str(shipped(folder))
    rargs = args_from_recipe(
        recipe, out=str(run / "finetune" if init_from else run), init_from=init_from, **common
    )
    metrics = train_renderer(rargs)  # type: ignore[arg-type]
    _replace_dir(shipped(Path(rargs.out)), out)
    return {"recipe": recipe.name, "args": dataclasses.asdict(rargs), "metrics": metrics, "phases": phases}


def predictor_data(path: Path, seed: int, recipe: Recipe, domain: str = "shapes") -> Path:
    """The recipe's state sequences (train split) as JSONL, written once. The shapes world: `data["clips"]` of
    every scenario at seed + data.get("seed_offset", 0), then each (scenarios, clips, offset[, length]) of
    `recipe.mix` (a part without a length has data's). Another domain that records data sets: its `generate`,
    `data["clips"]` clips of `data["length"]` states (after up to `data["warmup"]` steps of play, when given,
    under the domain's behaviour policy `data["policy"]` when given), states only."""
    from world import sequences

    dom = get_domain(domain)
    if not path.is_file() and dom.name != "shapes":
        with tempfile.TemporaryDirectory(prefix="semworld-data-", dir=path.parent) as tmp:
            written = dom.generate(  # type: ignore[attr-defined]
                tmp, clips=recipe.data["clips"], length=recipe.data["length"], split="train", video=False,
                seed=seed + recipe.data.get("seed_offset", 0), progress=False, warmup=recipe.data.get("warmup"),
                **({"policy": recipe.data["policy"]} if "policy" in recipe.data else {}),
            )  # fmt: skip
            os.replace(written, path)
    if not path.is_file():
        length = recipe.data["length"]
        parts = [("all", recipe.data["clips"], recipe.data.get("seed_offset", 0)), *recipe.mix]
        records = [
            r
            for scenarios, n, offset, *size in parts
            for r in sequences(scenarios, n, seed + offset, size[0] if size else length, "train")
        ]
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    return path


def recipe_chain(recipe: Recipe) -> list[Recipe]:
    """The recipes a fine-tune is made of, from the one trained from scratch to `recipe` itself."""
    chain = [recipe]
    while chain[0].init_from is not None:
        base = get_recipe(chain[0].init_from)
        if base.name in {r.name for r in chain}:
            raise ValueError(f"recipe {recipe.name!r}: init_from goes round in a circle at {base.name!r}")
        chain.insert(0, base)
    return chain


def train_predictor_phase(
    recipe: Recipe, folder: Path, seed: int, init_from: str | None, domain: str = "shapes", **run: Any
) -> tuple[TrainArgs, Any]:
    """One phase of a predictor chain in `folder`: the recipe's data (folder/train.jsonl, written once, from
    `domain`), its arguments and the run (folder/model/, resumed when a checkpoint is there), started from
    `init_from`. `run` adds device, threads, progress. Returns the arguments and the run's result."""
    from pipeline.training.predictor import train_predictor

    folder.mkdir(parents=True, exist_ok=True)
    data = predictor_data(folder / "train.jsonl", seed, recipe, domain)
    targs = args_from_recipe(
        recipe, data=str(data), out=str(folder / "model"), init_from=init_from, seed=seed, **run
    )
    assert isinstance(targs, TrainArgs)
    return targs, train_predictor(targs)[targs.model]


def _phase_record(recipe: Recipe, targs: TrainArgs, result: Any) -> dict[str, Any]:
    return {
        "args": dataclasses.asdict(targs),
        "data": dict(recipe.data),
        "mix": list(recipe.mix),
        "best": result.best,
        "epochs_run": len(result.history),
        "stopped_by": result.stopped_by,
    }


def build_predictor(args: TrainAllArgs, run: Path, out: Path) -> dict[str, Any]:
    """The predictor recipe into `out`. A fine-tune trains its chain of base recipes first, each in
    run/<recipe name>/ and started from the one before."""
    *bases, recipe = recipe_chain(_recipe(args, "predictor"))
    common: dict[str, Any] = dict(
        device=args.device, threads=args.threads, progress=args.progress, domain=args.domain
    )
    phases: dict[str, Any] = {}
    init_from = None
    for base in bases:  # each phase resumes from its own run folder
        bargs, base_result = train_predictor_phase(base, run / base.name, args.seed, init_from, **common)
        phases[base.name] = _phase_record(base, bargs, base_result)
        init_from = bargs.out
    targs, result = train_predictor_phase(recipe, run, args.seed, init_from, **common)
    _replace_dir(run / "model", out, PREDICTOR_FILES)
    return {"recipe": recipe.name, **_phase_record(recipe, targs, result), "phases": phases}


# ---- the weights folder --------------------------------------------------------------------------------
DEFAULT_CLASSES = {
    "captioner": ["transformers", "BlipForConditionalGeneration"],
    "predictor": ["semworld", "FourTensorModel"],
    "renderer": ["diffusers", "StableDiffusionPipeline"],
}


def stage_class(folder: Path, stage: str) -> list[str]:
    """[library, class] of a saved stage, read from its own files (the stage's default when it is not there)."""
    try:
        if stage == "captioner":
            cfg = json.loads((folder / "config.json").read_text())
            return ["transformers", cfg["architectures"][0]]
        if stage == "renderer":
            return ["diffusers", json.loads((folder / MODEL_INDEX).read_text())["_class_name"]]
        from models.hub import MODEL_KINDS

        kind = json.loads((folder / "config.json").read_text())["semworld_model"]
        return ["semworld", MODEL_KINDS[kind][1]]
    except (OSError, KeyError, IndexError, TypeError, json.JSONDecodeError):
        return list(DEFAULT_CLASSES[stage])


def write_model_index(out: str | Path, domain: str = "shapes") -> dict[str, Any]:
    """out/model_index.json: the domain every stage reads and writes, and every stage as [library, class], its
    folder being the stage's name (as in a diffusers pipeline); `WorldModelPipeline.from_pretrained` reads it.
    Classes come from the saved files."""
    out = Path(out)
    from world.scenarios import FPS, STRIDE

    dom = get_domain(domain)
    index: dict[str, Any] = {"_class_name": "WorldModelPipeline", "_semworld_layout": 1}
    # The rate of the states every stage was trained on: clips are read at it unless a caller says otherwise.
    index["state_rate"] = getattr(dom, "state_rate", FPS / STRIDE)
    index["domain"] = dom.name
    threshold = dom.confidence_threshold  # the shapes world's: calibrated on the shipped captioner
    if threshold is not None:
        index["confidence_threshold"] = threshold
    for stage in ("captioner", "predictor", "renderer"):
        if dom.name == "shapes" or (out / stage).is_dir():  # another domain lists the stages it has
            index[stage] = stage_class(out / stage, stage)
    atomic_write_json(out / MODEL_INDEX, index)
    return index


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def train_all(args: TrainAllArgs) -> dict[str, Any]:
    """Build the requested stages in order (each resumes from run_dir/<stage>), then write model_index.json."""
    from tqdm.auto import tqdm

    out, runs = Path(args.out), Path(args.run_dir)
    domain = get_domain(args.domain)
    todo = [s for s in STAGES if s in args.stages]
    for stage in todo:  # every recipe is there before anything trains
        try:
            _recipe(args, stage)
        except ValueError:
            raise UserError(
                f"--domain {args.domain}: no recipe {recipe_name(args.domain, stage, args.quick)!r} "
                f"for its {stage} in models/presets.py (train all rebuilds the domains that have a "
                f"recipe chain; docs/domains.md says how to train each stage of another)"
            ) from None
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    bar = tqdm(todo, desc="train all", unit="stage", disable=not args.progress)
    for stage in bar:
        bar.set_postfix(stage=stage)
        run = runs / stage
        done = run / DONE_FILE
        if done.is_file() and (out / stage).is_dir():
            logger.info("%s: already built (%s); delete it to rebuild", stage, done)
            report[stage] = json.loads(done.read_text())
            continue
        run.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if stage == "captioner":
            res = build_captioner(args, run, out / stage)
        elif stage == "renderer":
            res = build_renderer(
                args, run, out / stage, out / "captioner" if (out / "captioner").is_dir() else None
            )
        else:
            res = build_predictor(args, run, out / stage)
        res = {**res, "seconds": round(time.perf_counter() - t0, 1), "mb": round(folder_mb(out / stage), 2)}
        done.write_text(json.dumps(res, indent=2, default=str) + "\n")
        report[stage] = res
        logger.info("%s: built into %s in %.0f s (%.2f MB)", stage, out / stage, res["seconds"], res["mb"])
    report["model_index"] = write_model_index(out, domain.name)
    total = sum(folder_mb(out / s) for s in STAGES if (out / s).is_dir())
    report["total_mb"] = round(total, 2)
    if total > MAX_TOTAL_MB:
        logger.warning("%s holds %.1f MB of weights, over the %.0f MB budget", out, total, MAX_TOTAL_MB)
    return report
