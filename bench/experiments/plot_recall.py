"""The recall probe's answer rate against k, from the JSON files `bench.experiments.memory_recall` writes
(recall.json).

    python -m bench.experiments.plot_recall runs/memexp/novel_k18/recall.json --out docs/img/memory_recall.png

One line each for the model's own answers with the memory and with its read zeroed, and, where the file has them,
the linear probe's; chance (1 in 20 keys) dashed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("result", type=Path)
    p.add_argument("--title", default="recall probe: the key shown k windows before the answer (T = 4)")
    p.add_argument("--out", type=Path, default=Path("docs/img/memory_recall.png"))
    ns = p.parse_args(argv)
    r = json.loads(ns.result.read_text())
    ks = [int(k) for k in r["k"]]
    lines = [
        ("answer, with memory", r["with_memory"], "-o"),
        ("answer, memory read zeroed", r["memory_read_zeroed"], "-x"),
    ]
    for name, rates in r.get("linear_probe", {}).items():
        lines.append((f"linear probe, {name.replace('_', ' ')}", rates, ":."))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, rates, style in lines:
        ax.plot(ks, [100 * rates[str(k)] for k in ks], style, label=label)
    ax.axhline(100 * r["chance"], color="grey", ls="--", lw=1, label="chance")
    ax.set(
        xlabel="k (windows between the key and the answer)",
        ylabel="right (%)",
        ylim=(0, 102),
        xticks=ks,
        title=ns.title,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(ns.out, dpi=120)
    print(ns.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
