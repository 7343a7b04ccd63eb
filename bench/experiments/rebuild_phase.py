"""Rebuild one phase of a predictor recipe chain from the folder of the phase before, and compare the result with
the shipped run's weights byte for byte (sha256).

It runs the phase with the function `semworld train all` runs each phase with
(`pipeline.training.all.train_predictor_phase`), so a match says that the committed recipe reproduces the run. The whole chain from scratch
is `make weights` (hours of CPU); this checks one phase in minutes:

    python -m bench.experiments.rebuild_phase --recipe predictor --init-from runs/t8e/model --out runs/rebuild/t8f \\
        --compare weights/predictor/model.safetensors
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from models.presets import get_recipe
from pipeline.training.all import train_predictor_phase


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", required=True, help="a predictor recipe name (models/presets.py)")
    p.add_argument("--init-from", required=True, help="the folder of the phase the recipe starts from")
    p.add_argument("--out", required=True, type=Path, help="run folder (train.jsonl, model/)")
    p.add_argument("--compare", type=Path, default=None, help="model.safetensors of the shipped run")
    p.add_argument("--seed", type=int, default=0, help="the run's seed, as `train all --seed` (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the shipped runs used 1)")
    ns = p.parse_args(argv)
    recipe = get_recipe(ns.recipe)
    if recipe.stage != "predictor":
        p.error(f"{ns.recipe} is a {recipe.stage} recipe; this rebuilds predictor phases")
    train_predictor_phase(
        recipe, ns.out, ns.seed, ns.init_from, device="cpu", threads=ns.threads, progress=False
    )
    rebuilt = sha256(ns.out / "model" / "model.safetensors")
    print(f"{ns.recipe}: rebuilt sha256 {rebuilt}")
    if ns.compare is not None:
        shipped = sha256(ns.compare)
        print(f"{ns.recipe}: shipped sha256 {shipped}: {'identical' if rebuilt == shipped else 'DIFFERENT'}")
        return 0 if rebuilt == shipped else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
