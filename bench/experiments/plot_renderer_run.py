"""The periodic evaluations of renderer training runs against step, one line per run, from their log.jsonl files
(`semworld train renderer` and `semworld train all` write one per run folder):

    python -m bench.experiments.plot_renderer_run "symmetric=runs/old/renderer/base/log.jsonl" \\
        "truth=runs/a/log.jsonl,runs/b/log.jsonl" --stage vae --metric object_cell_acc --metric psnr \\
        --out docs/img/renderer_vae_weighting.png

A run given as several logs (a run continued in another folder) is read in order, a later log's step replacing an
earlier one's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.experiments.plot_horizon import save_with_legend_below

PERCENT = ("object_cell_acc", "layout_acc", "object_shape_acc", "frame_acc", "roundtrip_acc")


def evaluations(logs: list[Path], stage: str) -> dict[int, dict[str, float]]:
    """step -> the evaluation logged at that step of `stage`, over the logs in order."""
    points: dict[int, dict[str, float]] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if record.get("stage") == stage and "eval" in record:
                points[int(record["step"])] = record["eval"]
    return points


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="LABEL=LOG[,LOG...]")
    p.add_argument("--stage", default="vae", help="vae or unet (default vae)")
    p.add_argument("--metric", action="append", default=None, help="a key of the evaluations (repeatable; "
                   "default object_cell_acc and psnr)")  # fmt: skip
    p.add_argument("--mark", type=int, action="append", default=[], help="a step to mark with a dotted line")
    p.add_argument("--title", default="")
    p.add_argument("--out", type=Path, required=True)
    ns = p.parse_args(argv)
    metrics = ns.metric or ["object_cell_acc", "psnr"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8), squeeze=False)
    for spec in ns.runs:
        label, _, paths = spec.partition("=")
        points = evaluations([Path(x) for x in paths.split(",")], ns.stage)
        if not points:
            p.error(f"{label}: no {ns.stage} evaluations in {paths}")
        steps = sorted(points)
        for ax, key in zip(axes[0], metrics, strict=True):
            scale = 100.0 if key in PERCENT else 1.0
            ax.plot(
                steps,
                [scale * points[s].get(key, float("nan")) for s in steps],
                marker="o",
                ms=3,
                label=label,
            )
    for ax, key in zip(axes[0], metrics, strict=True):
        ax.set_ylabel(f"{key} (%)" if key in PERCENT else key)
        ax.set_xlabel(f"{ns.stage} step")
        ax.grid(alpha=0.3)
        for step in ns.mark:
            ax.axvline(step, color="grey", ls=":", lw=1)
    fig.suptitle(ns.title, fontsize=10)
    save_with_legend_below(fig, axes[0][0], ns.out, ncol=2, fontsize=9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
