"""`semworld train all` / `make weights`: rebuild every shipped model from scratch, seeded, into one weights folder.

Owns the predictor's shipped recipe (world data -> `train_predictor` -> weights/predictor/), the order of the
stages (captioner, then the renderer that reads its frames back with it, then the predictor), copying each
stage's final files into `out/<stage>/`, and `model_index.json`. Each stage resumes from its run directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.utils import MODEL_INDEX, UserError, atomic_dir, atomic_write_json, atomic_write_text

logger = logging.getLogger(__name__)

STAGES = ("captioner", "renderer", "predictor")
DONE_FILE = "done.json"  # in a stage's run directory once its weights are in place
MAX_TOTAL_MB = 40.0
PREDICTOR_FILES = ("config.json", "model.safetensors", "tokenizer.json", "training_summary.json")

# The predictor that ships: the 4-tensor model on world state sequences of every scenario (train split), 5% of
# the clips held out for the section 8.2 stopping rule; docs/predictor_world.md has the measurements behind it.
PREDICTOR_RECIPE: dict[str, Any] = {
    "model": "four_tensor", "preset": "small", "causal_slices": False, "clips": 3000, "length": 20,
    "max_windows": None, "epochs": 8, "batch_size": 32, "lr": 1e-3, "val_fraction": 0.05,
}
# --quick: the same code path in seconds (tests, smoke runs); the models it makes are not worth shipping.
QUICK_PREDICTOR = {"preset": "tiny", "clips": 40, "length": 8, "max_windows": 120, "epochs": 1}
QUICK_CAPTIONER = {"epochs": 1, "steps_per_epoch": 2, "batch_size": 4, "eval_frames": 8, "test_clips": 1,
                   "warmup_steps": 1}
QUICK_CAPTIONER_MODEL = {"image_size": 32, "patch_size": 8, "vision_layers": 1, "text_layers": 1, "hidden": 32,
                         "heads": 2}
QUICK_RENDERER = {"image_size": 32, "output_size": 32, "vae_channels": (8, 16), "unet_channels": (16, 32),
                  "text_width": 32, "text_layers": 1, "vae_steps": 2, "unet_steps": 2, "vae_batch": 2,
                  "unet_batch": 2, "pool": 8, "eval_every": 1000, "eval_states": 2, "checkpoint_every": 1,
                  "sample_steps": 2}


@dataclass
class TrainAllArgs:
    """out: the weights folder (captioner/, renderer/, predictor/, model_index.json). run_dir: checkpoints and
    logs of each stage (run_dir/<stage>/), from which a rerun resumes. seed: every stage's seed. stages: which
    to (re)build; the others are left as they are. threads: torch CPU threads per stage. device: for the
    predictor ("auto", "cpu", "cuda"). quick: tiny budgets (a smoke test of the whole path). progress: bars."""

    out: str = "weights"
    run_dir: str = "runs/weights"
    seed: int = 0
    stages: tuple[str, ...] = STAGES
    threads: int = 1
    device: str = "auto"
    quick: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        self.stages = tuple(self.stages)
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise UserError(f"--stages: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(STAGES)}")
        if self.threads < 1 or self.seed < 0:
            raise UserError(f"--threads must be >= 1 and --seed >= 0, got {self.threads}, {self.seed}")


def _recipe(module: Any, fallback: dict[str, Any]) -> dict[str, Any]:
    """A stage module's own shipped settings (`SHIPPED_RECIPE`, owned by its author), else `fallback`."""
    return dict(getattr(module, "SHIPPED_RECIPE", fallback))


def _replace_dir(src: Path, dst: Path, files: tuple[str, ...] | None = None) -> None:
    """Copy src (or the named files of it) to dst through a scratch folder, then swap it in."""
    with atomic_dir(dst) as tmp:
        for name in files if files is not None else sorted(p.name for p in src.iterdir()):
            if (src / name).is_dir():
                shutil.copytree(src / name, tmp / name)
            elif (src / name).is_file():
                shutil.copy2(src / name, tmp / name)


# ---- the stages ----------------------------------------------------------------------------------------
def build_captioner(args: TrainAllArgs, run: Path, out: Path) -> dict[str, Any]:
    from pipeline.training import captioner as tc

    if not args.quick:
        # The shipped recipe has two phases: from scratch, then a fine-tune on nudged and rescaled frames.
        metrics = tc.train_shipped(out, run, seed=args.seed, threads=args.threads)
        return {"args": {"recipe": "train_captioner.train_shipped", "finetune": dict(tc.SHIPPED_FINETUNE)},
                "metrics": metrics}
    fields = {**_recipe(tc, {}), **QUICK_CAPTIONER}
    model = {**fields.pop("model", {}), **QUICK_CAPTIONER_MODEL}
    targs = tc.TrainCaptionerArgs(out=str(out), run_dir=str(run), seed=args.seed, threads=args.threads,
                                  model=tc.CaptionerConfig(**model), **fields)
    return {"args": dataclasses.asdict(targs), "metrics": tc.train_captioner(targs)}


def build_renderer(args: TrainAllArgs, run: Path, out: Path, captioner: Path | None) -> dict[str, Any]:
    from pipeline.training import renderer as tr

    fields = {**_recipe(tr, {}), **(QUICK_RENDERER if args.quick else {})}
    rargs = tr.TrainRendererArgs(out=str(run), seed=args.seed, threads=args.threads,
                                 captioner=str(captioner) if captioner is not None else None, **fields)
    metrics = tr.train_renderer(rargs)
    # train_renderer leaves the final diffusers checkpoint in run/pipeline (and the best evaluated in run/best).
    _replace_dir(run / getattr(tr, "SHIPPED_FOLDER", "pipeline"), out)
    return {"args": rargs.to_dict(), "metrics": metrics}


def predictor_data(path: Path, seed: int, clips: int, length: int) -> Path:
    """World state sequences of every scenario (train split) as JSONL, written once."""
    from world import sequences

    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in sequences("all", clips, seed, length, "train")))
    return path


def build_predictor(args: TrainAllArgs, run: Path, out: Path) -> dict[str, Any]:
    from pipeline.training.predictor import TrainArgs, train_predictor

    recipe = {**PREDICTOR_RECIPE, **(QUICK_PREDICTOR if args.quick else {})}
    data = predictor_data(run / "train.jsonl", args.seed, recipe["clips"], recipe["length"])
    targs = TrainArgs(
        data=str(data), preset=recipe["preset"], out=str(run / "model"), model=recipe["model"],
        epochs=recipe["epochs"], batch_size=recipe["batch_size"], seed=args.seed,
        causal_slices=recipe["causal_slices"], val_fraction=recipe["val_fraction"],
        max_windows=recipe["max_windows"], lr=recipe["lr"], device=args.device, threads=args.threads,
        progress=args.progress,
    )
    result = train_predictor(targs)[recipe["model"]]
    _replace_dir(run / "model", out, PREDICTOR_FILES)
    return {"recipe": recipe, "best": result.best, "epochs_run": len(result.history),
            "stopped_by": result.stopped_by}


# ---- the weights folder --------------------------------------------------------------------------------
DEFAULT_CLASSES = {"captioner": ["transformers", "BlipForConditionalGeneration"],
                   "predictor": ["semworld", "FourTensorModel"],
                   "renderer": ["diffusers", "StableDiffusionPipeline"]}


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


def write_model_index(out: str | Path) -> dict[str, Any]:
    """out/model_index.json: every stage as [library, class], its folder being the stage's name (as in a
    diffusers pipeline); `WorldModelPipeline.from_pretrained` reads it. Classes come from the saved files."""
    out = Path(out)
    index: dict[str, Any] = {"_class_name": "WorldModelPipeline", "_semworld_layout": 1}
    for stage in ("captioner", "predictor", "renderer"):
        index[stage] = stage_class(out / stage, stage)
    atomic_write_json(out / MODEL_INDEX, index)
    return index


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def train_all(args: TrainAllArgs) -> dict[str, Any]:
    """Build the requested stages in order (each resumes from run_dir/<stage>), then write model_index.json."""
    from tqdm.auto import tqdm

    out, runs = Path(args.out), Path(args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    todo = [s for s in STAGES if s in args.stages]
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
            res = build_renderer(args, run, out / stage,
                                 out / "captioner" if (out / "captioner").is_dir() else None)
        else:
            res = build_predictor(args, run, out / stage)
        res = {**res, "seconds": round(time.perf_counter() - t0, 1), "mb": round(folder_mb(out / stage), 2)}
        done.write_text(json.dumps(res, indent=2, default=str) + "\n")
        report[stage] = res
        logger.info("%s: built into %s in %.0f s (%.2f MB)", stage, out / stage, res["seconds"], res["mb"])
    report["model_index"] = write_model_index(out)
    total = sum(folder_mb(out / s) for s in STAGES if (out / s).is_dir())
    report["total_mb"] = round(total, 2)
    if total > MAX_TOTAL_MB:
        logger.warning("%s holds %.1f MB of weights, over the %.0f MB budget", out, total, MAX_TOTAL_MB)
    return report


# ---- command line --------------------------------------------------------------------------------------
def add_parser(train_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `all` to `semworld train`; its func runs train_all and returns 0."""
    d = TrainAllArgs()
    p = train_subparsers.add_parser(
        "all", help="rebuild every shipped model (captioner, renderer, predictor) from scratch",
        description="Rebuild the shipped weights folder, seeded and resumable (rerun the same command to resume).",
    )
    p.add_argument("--out", default=d.out, help="weights folder (default %(default)s)")
    p.add_argument("--run-dir", default=d.run_dir, help="checkpoints and logs per stage (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages (default: all)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads (default %(default)s)")
    p.add_argument("--device", default=d.device, help="predictor device (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="tiny budgets: a smoke test, not shippable weights")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=run_train_all)
    return p


def run_train_all(ns: argparse.Namespace) -> int:
    args = TrainAllArgs(out=ns.out, run_dir=ns.run_dir, seed=ns.seed, threads=ns.threads, device=ns.device,
                        stages=tuple(s.strip() for s in ns.stages.split(",") if s.strip()), quick=ns.quick,
                        progress=ns.progress)
    report = train_all(args)
    logger.info("weights in %s: %s MB in all", args.out, report["total_mb"])
    return 0


if __name__ == "__main__":  # python -m pipeline.training.all --out weights ... (what `make weights` runs)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _parser = argparse.ArgumentParser(prog="python -m pipeline.training.all")
    add_parser(_parser.add_subparsers())
    _ns = _parser.parse_args(["all", *sys.argv[1:]])
    try:
        sys.exit(_ns.func(_ns))
    except (UserError, ValueError, FileNotFoundError) as _err:
        sys.stderr.write(f"semworld: error: {_err}\n")
        sys.exit(2)
