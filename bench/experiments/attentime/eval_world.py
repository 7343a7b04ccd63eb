"""Next-state exact match on the world's test split (200 clips, rollouts of 8 from true histories) for several
predictor folders, with pipeline.evaluation.world.score_predictor (the function behind `semworld eval world`).

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.experiments.attentime.eval_world weights/predictor runs/predictor/ft_attentime
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from pipeline.evaluation.world import clips_from_records, score_predictor
from pipeline.predictor import Predictor
from world import sequences

ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str]) -> int:
    """argv: predictor folders; results go to runs/bench/attentime_world_eval/<folder name>.json."""
    torch.set_num_threads(1)
    records = sequences("all", 200, seed=0, length=20, split="test")
    clips = clips_from_records(records)
    for folder in argv:
        res = score_predictor(Predictor.from_pretrained(folder), clips, horizon=8, min_history=4)
        dest = ROOT / "runs" / "bench" / "attentime_world_eval" / f"{Path(folder).name}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(res, indent=1))
        h1 = {f: t["1"] for f, t in res["by_family"].items()}
        print(
            folder, "by horizon", res["by_horizon"], "h1 by family", h1, "valid", res["valid_h1"], flush=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
