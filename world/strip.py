"""Picture strips of the world (frames with their states underneath) for docs/world.md.

python -m world.strip docs/img    # writes docs/img/world_physics.png, world_memory.png, world_stochastic.png
"""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path

from world.render import render_state
from world.scenarios import episode

log = logging.getLogger(__name__)


def make_strip(rows: list[tuple[str, list[str], list[bool], int]], path: Path | str, title: str = "") -> None:
    """One row per (label, states, predictable, first k): frames with their states, unpredictable ones in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(states) for _, states, _, _ in rows)
    fig, axes = plt.subplots(len(rows), cols, figsize=(1.75 * cols, 2.45 * len(rows)), squeeze=False)
    for r, (label, states, flags, first) in enumerate(rows):
        for c in range(cols):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(states):
                ax.axis("off")
                continue
            ax.imshow(render_state(states[c]), interpolation="nearest")
            for spine in ax.spines.values():
                spine.set_color("#c0392b" if not flags[c] else "#9aa0aa")
                spine.set_linewidth(2.0 if not flags[c] else 0.6)
            text = "\n".join(textwrap.wrap(states[c], 24))
            ax.set_xlabel(text, fontsize=6.2, family="monospace", linespacing=1.1)
            head = f"k={first + c}" if flags[c] else f"k={first + c}  unpredictable"
            ax.set_title(head, fontsize=7, color="#c0392b" if not flags[c] else "#333333")
            if c == 0:
                ax.set_ylabel(label, fontsize=10, fontweight="bold")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_doc_strips(folder: Path | str, seed: int = 4) -> list[Path]:
    """The strips shown in docs/world.md."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    # (scenario, first clip index to look at, states shown, what makes a clip a good illustration)
    groups = {
        "physics": [
            ("bounce", (0, 6), lambda ep: len(ep.identities) == 3),
            (
                "gravity",
                (0, 6),
                lambda ep: len(ep.identities) >= 2 and any(s == "ball" for _, s in ep.identities),
            ),
            ("collide", (0, 6), lambda ep: len(ep.identities) == 3),
            ("occlude", (0, 6), lambda ep: len(ep.identities) == 2),
        ],
        "memory": [
            ("blink", (0, 7), lambda ep: len(ep.identities) == 1),
            ("blink", (7, 14), None),
            ("hide", (0, 7), lambda ep: len(ep.identities) == 2),
            ("hide", (7, 14), None),
        ],
        "stochastic": [
            ("appear", (0, 7), lambda ep: len(ep.identities) == 2),
            ("appear", (0, 7), lambda ep: len(ep.identities) == 3 and ep.appear_at[-1] <= 5),
        ],
    }
    paths = []
    for family, picks in groups.items():
        rows = []
        ep = None
        for name, (start, stop), want in picks:
            if want is not None:  # a new clip: the first one (from this seed) that illustrates the point
                ep = next(e for e in (episode(name, seed, i, length=14) for i in range(200)) if want(e))
            assert ep is not None
            label = name if start == 0 else f"{name} (cont.)"
            rows.append((label, ep.states[start:stop], ep.predictable[start:stop], start))
        path = out / f"world_{family}.png"
        make_strip(rows, path)
        paths.append(path)
        log.info("wrote %s", path)
    return paths


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    write_doc_strips(sys.argv[1] if len(sys.argv) > 1 else "docs/img")
