"""Exact match against horizon, one line per predictor, from the JSON files `bench.experiments.memory_world_eval`
writes.

    python -m bench.experiments.plot_horizon runs/forecast/eval/ep1_seed0.json runs/forecast/eval/ft_seed0.json \\
        --drop "ft epoch1" --rename "shipped=4-tensor, paper's rule (before)" --out docs/img/horizon.png

Draws the "all" panel and one panel per family; a label seen in several files keeps its first result. The
panels are on the targets the history determines (`by_horizon`, `by_family`); with --flagged, the "all" panel
also draws each predictor's rate on every flagged step, random events inside the rollout included, dashed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def save_with_legend_below(fig, ax, out: Path, ncol: int, fontsize: float | None = None) -> None:
    """Draw `ax`'s legend under the panels in rows of `ncol`, leave room for it, and write the figure to `out`
    (also bench/experiments/plot_renderer_run.py's)."""
    handles, labels = ax.get_legend_handles_labels()
    ncol = min(len(labels), ncol)
    rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, fontsize=fontsize)
    fig.tight_layout(rect=(0, 0.05 + 0.05 * rows, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--drop", action="append", default=[], help="a label to leave out (repeatable)")
    p.add_argument("--rename", action="append", default=[], help="OLD=NEW (repeatable)")
    p.add_argument(
        "--title", default="exact match of the whole state, test split, targets the history determines"
    )
    p.add_argument(
        "--flagged",
        action="store_true",
        help="also draw `by_horizon_flagged` (every flagged step) in the all panel, dashed",
    )
    p.add_argument("--out", type=Path, default=Path("docs/img/horizon.png"))
    p.add_argument("--ymin", type=float, default=0.0, help="lower end of the y axis, in %% (default 0)")
    ns = p.parse_args(argv)
    names = dict(r.split("=", 1) for r in ns.rename)
    runs: dict[str, dict] = {}
    for path in ns.results:
        for label, res in json.loads(path.read_text()).items():
            if label not in ns.drop:
                runs.setdefault(names.get(label, label), res)
    families = sorted(next(iter(runs.values()))["by_family"])
    fig, axes = plt.subplots(1, 1 + len(families), figsize=(4.2 * (1 + len(families)), 3.8), sharey=True)
    for ax, fam in zip(axes, ["all", *families], strict=True):
        for i, (label, res) in enumerate(runs.items()):
            rates = res["by_horizon"] if fam == "all" else res["by_family"][fam]
            hs = sorted(int(h) for h in rates if rates[h] is not None)
            # the colour cycle has ten colours: an eleventh line and on repeat one, dash-dotted and square-marked
            style = {"marker": "o", "ls": "-"} if i < 10 else {"marker": "s", "ls": "-."}
            (line,) = ax.plot(hs, [100 * rates[str(h)] for h in hs], ms=3, label=label, **style)
            if fam == "all" and ns.flagged and "by_horizon_flagged" in res:
                flagged = res["by_horizon_flagged"]
                hs = sorted(int(h) for h in flagged if flagged[h] is not None)
                ax.plot(
                    hs,
                    [100 * flagged[str(h)] for h in hs],
                    ls="--",
                    lw=1,
                    color=line.get_color(),
                    label=f"{label}, every flagged step",
                )
        ax.set_title(fam)
        ax.set_xlabel("horizon h")
        ax.set_xticks(range(1, 9))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match (%)")
    axes[0].set_ylim(ns.ymin, 101)
    fig.suptitle(ns.title)
    save_with_legend_below(fig, axes[0], ns.out, ncol=3)  # rows of three: six long labels in one row run off
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
