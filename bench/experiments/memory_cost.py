"""Cost per predicted state against history length: the tensor-memory predictor against a 4-tensor model whose
window grows to cover the whole history (docs/tensor-memory.md).

Both are preset `small` (d_x 16, d_t 8, H 2, L 2, N 16) on real world states (test clips laid end to end). For a
history of n states:
- memory, cold: stream the n states through the memory (n - T windows of T = 4) and predict the next state;
  this is what Predictor.predict does for a new history: O(n) time, O(1) memory;
- memory, warm: one more state of a rollout with (h, c) carried: O(1) in n;
- grown window: a 4-tensor model with T = n predicts the next state in one forward over all n states (the packed
  inference path): attention over 16n slots, O(n^2) time and memory. Run up to --max-window states (2048: about a
  minute per call); beyond that its time is extrapolated as n^2 and marked so.
Times are medians of interleaved repeats in one process, one thread. Peak memory is measured in a fresh child
process per point (the rise of ru_maxrss over the process after loading, i.e. the call's own peak).

    python -m bench.experiments.memory_cost --out docs/img/memory_cost.png --json runs/memory/cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import world
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config
from models.tensor_memory import TensorMemoryConfig
from pipeline.tokenizer import StateTokenizer

LENGTHS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def history_ids(n: int) -> tuple[torch.Tensor, int]:
    """(1, n, 16) ids of n real world states, and the vocabulary size."""
    recs = world.sequences("all", -(-n // 20), seed=0, length=20, split="test")
    states = [s for r in recs for s in r["states"]][:n]
    tok = StateTokenizer.build(world.VOCAB if hasattr(world, "VOCAB") else states)
    return tok.encode_states(states, 16).ids[None], tok.vocab_size


def build(kind: str, n: int, vocab: int) -> FourTensorModel:
    torch.manual_seed(0)
    if kind == "window":
        return FourTensorModel(four_tensor_config("small", vocab_size=vocab, T=n)).eval()
    return FourTensorModel(
        four_tensor_config("small", vocab_size=vocab, memory=TensorMemoryConfig(d_emb=128))
    ).eval()


def call(kind: str, model: FourTensorModel, ids: torch.Tensor, state: Any = None) -> Any:
    with torch.no_grad():
        if kind == "window":
            return model.predict_next(ids)
        if kind == "cold":
            return model.predict_next(ids[:, -4:], model.stream_memory(ids))
        return model.predict_next(ids[:, -4:], state)  # warm: one step with the state carried


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(kind: str, n: int) -> None:
    """One call in a fresh process: the rise of its resident set over what was resident just before."""
    ids, vocab = history_ids(n)
    model = build("window" if kind == "window" else "memory", n, vocab)
    state = model.init_memory(1) if kind == "warm" else None
    small_ids, _ = history_ids(
        16
    )  # first call of every kernel on a small model, so that one-off set-up is not counted
    small = build("window" if kind == "window" else "memory", 16, vocab)
    call(kind, small, small_ids, small.init_memory(1) if kind == "warm" else None)
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark VmHWM to the current RSS
    before = _status_kb("VmRSS")
    call(kind, model, ids, state)
    print(json.dumps({"peak_mb": (_status_kb("VmHWM") - before) / 1024}))


def peak_mb(kind: str, n: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "bench.experiments.memory_cost", "--child", kind, str(n)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    p.add_argument("--max-window", type=int, default=2048, help="largest grown window actually run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="docs/img/memory_cost.png")
    p.add_argument("--json", default="runs/memory/cost.json")
    p.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    torch.set_num_threads(1)
    if ns.child:
        child(ns.child[0], int(ns.child[1]))
        return 0
    rows = []
    small_ids, vocab = history_ids(16)  # first call of every kernel, on small models
    for k in ("cold", "warm", "window"):
        small = build("window" if k == "window" else "memory", 16, vocab)
        call(k, small, small_ids, small.init_memory(1) if k == "warm" else None)
    for n in ns.lengths:
        ids, vocab = history_ids(n)
        mem = build("memory", n, vocab)
        win = build("window", n, vocab) if n <= ns.max_window else None
        state = mem.init_memory(1)
        kinds = ["cold", "warm"] + (["window"] if win is not None else [])
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(ns.repeats):  # interleaved: cold, warm, window, cold, ...
            for k in kinds:
                t0 = time.perf_counter()
                call(k, win if k == "window" else mem, ids, state)
                times[k].append(time.perf_counter() - t0)
        row: dict[str, Any] = {"n": n, **{f"{k}_s": statistics.median(v) for k, v in times.items()}}
        for k in kinds:
            row[f"{k}_peak_mb"] = peak_mb(k, n)
        if win is not None:
            row["window_over_cold"] = row["window_s"] / row["cold_s"]
            row["window_over_warm"] = row["window_s"] / row["warm_s"]
        rows.append(row)
        print(
            json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}), flush=True
        )
        del win
    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(
        json.dumps({"rows": rows, "torch": torch.__version__, "threads": 1}, indent=2) + "\n"
    )
    plot(rows, Path(ns.out), ns.max_window)
    return 0


def plot(rows: list[dict[str, Any]], path: Path, max_window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["n"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    a.loglog(
        n, [r["cold_s"] * 1e3 for r in rows], "o-", label="memory, cold: stream n states, predict 1  (O(n))"
    )
    a.loglog(
        n,
        [r["warm_s"] * 1e3 for r in rows],
        "s-",
        label="memory, warm: 1 rollout step, (h, c) carried  (O(1))",
    )
    w = [r for r in rows if "window_s" in r]
    a.loglog(
        [r["n"] for r in w],
        [r["window_s"] * 1e3 for r in w],
        "^-",
        label="4-tensor, window grown to n  (O(n^2))",
    )
    if w:  # the quadratic continued past what was run
        last = w[-1]
        ext = [m for m in n if m >= last["n"]]
        a.loglog(
            ext,
            [last["window_s"] * 1e3 * (m / last["n"]) ** 2 for m in ext],
            "^:",
            color=a.lines[-1].get_color(),
            alpha=0.6,
            label=f"  (n^2 extrapolated beyond {max_window})",
        )
    a.set_xlabel("history length n (states)")
    a.set_ylabel("time per predicted state (ms)")
    a.set_title("time, one CPU thread")
    a.grid(alpha=0.3, which="both")
    a.legend(fontsize=7)
    b.loglog(n, [max(r["cold_peak_mb"], 0.1) for r in rows], "o-", label="memory, cold")
    b.loglog(n, [max(r["warm_peak_mb"], 0.1) for r in rows], "s-", label="memory, warm")
    b.loglog(
        [r["n"] for r in w], [max(r["window_peak_mb"], 0.1) for r in w], "^-", label="4-tensor, grown window"
    )
    b.set_xlabel("history length n (states)")
    b.set_ylabel("peak memory of the call (MB)")
    b.set_title("peak memory (rise of max RSS)")
    b.grid(alpha=0.3, which="both")
    b.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
