"""Speed of the 4-tensor predictor with Attentime as its joint attention against the plain 4-tensor attention:
time per predicted state (predict_next) and per training window (forward + backward + AdamW), side by side in one
process, runs interleaved (A B A B ...) with medians and the median of adjacent-pair ratios (the helpers of
bench/predictor_speed.py). The plain model runs its packed path, Attentime the dense one (it has no packed path).

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.experiments.attentime_speed      # preset small, world vocabulary
    .venv/bin/python -m bench.experiments.attentime_speed --preset medium --vocab 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from bench.predictor_speed import interleaved, make_windows
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--vocab", type=int, default=30, help="|V| (the world's tokenizer: 30)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=25)
    p.add_argument("--train-repeats", type=int, default=15)
    p.add_argument("--pad-fraction", type=float, default=0.43, help="world windows: 0.4323")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=Path("runs/bench/attentime_speed.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    models = {}
    for att in ("four_tensor", "attentime"):
        torch.manual_seed(0)
        models[att] = FourTensorModel(four_tensor_config(args.preset, vocab_size=args.vocab, attention=att))
    c = models["four_tensor"].config
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    print(f"preset {args.preset} |V|={args.vocab}: params {params}; threads {args.threads}")
    out: dict[str, object] = {
        "preset": args.preset,
        "vocab": args.vocab,
        "params": params,
        "threads": args.threads,
    }

    for m in models.values():
        m.eval()
    for B in args.batches:
        wins = [make_windows(B, c.T, c.N, args.vocab, args.pad_fraction, g) for _ in range(args.repeats)]
        fns = [lambda r, m=m, w=wins: m.predict_next(w[r][:, : c.T]) for m in models.values()]
        wall, _ = interleaved(fns, args.repeats, 2, "cpu")
        a, b = (statistics.median(w) / B for w in wall)
        pair = statistics.median(y / x for x, y in zip(*wall, strict=True))
        out[f"predict_b{B}"] = {
            "four_tensor_ms": 1e3 * a,
            "attentime_ms": 1e3 * b,
            "ratio": b / a,
            "pair_ratio": pair,
        }
        print(
            f"predict_next batch {B}: per state 4-tensor {1e3 * a:.3f} ms, Attentime {1e3 * b:.3f} ms, "
            f"ratio {b / a:.2f} (pairs {pair:.2f})"
        )

    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    for m in models.values():
        m.train()
    wins = [
        make_windows(args.train_batch, c.T, c.N, args.vocab, args.pad_fraction, g)
        for _ in range(args.train_repeats)
    ]

    def step(k: str, r: int) -> None:
        opts[k].zero_grad()
        models[k].training_step(wins[r]).backward()
        opts[k].step()

    wall, _ = interleaved([lambda r, k=k: step(k, r) for k in models], args.train_repeats, 2, "cpu")
    a, b = (statistics.median(w) / args.train_batch for w in wall)
    pair = statistics.median(y / x for x, y in zip(*wall, strict=True))
    out["train"] = {
        "four_tensor_ms_per_window": 1e3 * a,
        "attentime_ms_per_window": 1e3 * b,
        "ratio": b / a,
        "pair_ratio": pair,
    }
    print(
        f"training, batch {args.train_batch}: per window 4-tensor {1e3 * a:.3f} ms, Attentime {1e3 * b:.3f} ms, "
        f"ratio {b / a:.2f} (pairs {pair:.2f})"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
