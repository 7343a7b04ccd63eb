"""Speed of the 4-tensor predictor against the 1-D GPT-2 baseline: time per predicted state and training windows/s.

Both models have the same width d = d_x*d_t, depth and heads. The 4-tensor model predicts S(T) in one parallel
forward of the window; the baseline decodes S(T) greedily, N tokens one after another with its KV cache. Training
is forward + backward + AdamW step (the baseline with its free-running loop of section 7.4). The two models' runs
are interleaved (A B A B ...) because this machine's speed swings from second to second; medians are reported,
with the ratio of the medians and the median of the ratios of adjacent A/B pairs.

    .venv/bin/python bench/predictor_speed.py                 # mid-size CPU config, ~2-3 minutes
    .venv/bin/python bench/predictor_speed.py --d-x 64 --d-t 32 --vocab 36711 --layers 2 --heads 4   # paper size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from models.baseline import BaselineConfig, BaselineModel  # noqa: E402
from models.four_tensor import FourTensorConfig, FourTensorModel  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--d-x", type=int, default=16, help="semantic fiber d_x (width d = d_x*d_t)")
    p.add_argument("--d-t", type=int, default=8, help="temporal-context fiber d_t")
    p.add_argument("--N", type=int, default=16, help="token slots per sentence")
    p.add_argument("--T", type=int, default=4, help="sentences in the input prefix")
    p.add_argument("--vocab", type=int, default=2000, help="content vocabulary size |V|")
    p.add_argument("--layers", type=int, default=2, help="layers L")
    p.add_argument("--heads", type=int, default=2, help="heads H")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64], help="inference batch sizes")
    p.add_argument("--train-batch", type=int, default=64, help="training batch size")
    p.add_argument("--repeats", type=int, default=25, help="interleaved A/B pairs per inference measurement")
    p.add_argument("--train-repeats", type=int, default=15, help="interleaved A/B pairs of training steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of each model before timing")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is steadiest on a shared box)")
    p.add_argument("--pad-fraction", type=float, default=0.39, help="mean padding fraction (ROCStories: 0.3876)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, default=Path("runs/bench/predictor_speed.json"), help="JSON output")
    p.add_argument("--markdown", type=Path, default=Path("runs/bench/predictor_speed.md"), help="markdown table")
    return p.parse_args(argv)


def make_windows(B: int, T: int, N: int, vocab: int, pad_fraction: float, g: torch.Generator) -> torch.Tensor:
    """(B, T+1, N) random windows; each sentence keeps a random number of leading tokens (mean ~ 1-pad_fraction)."""
    ids = torch.randint(1, vocab, (B, T + 1, N), generator=g)
    mean_len = max(1.0, (1.0 - pad_fraction) * N)
    lo, hi = max(1, round(2 * mean_len - N)), N  # uniform lengths with the requested mean
    lengths = torch.randint(lo, hi + 1, (B, T + 1), generator=g)
    slots = torch.arange(N)
    return ids.masked_fill(slots[None, None, :] >= lengths[..., None], 0)


def macs_per_state(args: argparse.Namespace, live_prefix: float) -> dict[str, float]:
    """Multiply-adds of the matrix products for one predicted state (inference), to explain the timings.

    4-tensor: every one of the N*T slots (padding included) goes through H full d x d heads and the MLP, and
    predict_next reads out all N*T slots. Baseline: a prefill of the live prefix (d split across heads), then N-1
    one-token steps against the cache, with the readout at the last position only.
    """
    d, L, H, V, NT = args.d_x * args.d_t, args.layers, args.heads, args.vocab, args.N * args.T
    four = L * (NT * 3 * H * d * d + H * 2 * NT * NT * d + NT * 8 * d * d) + NT * d * V + d * V
    P = live_prefix
    base = L * (P * 12 * d * d + P * P * d) + d * (V + 2)  # prefill (causal attention ~ P^2/2 scores + P^2/2 AV)
    for k in range(1, args.N):
        base += L * (12 * d * d + 2 * (P + k) * d) + d * (V + 2)
    return {"four_tensor": float(four), "baseline": float(base)}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(fa: Callable[[], None], fb: Callable[[], None], repeats: int, warmup: int, device: str):
    """Run A, B, A, B, ... and return the two lists of seconds per run."""
    for _ in range(warmup):
        fa()
        fb()
    ta, tb = [], []
    for _ in range(repeats):
        for f, out in ((fa, ta), (fb, tb)):
            sync(device)
            t0 = time.perf_counter()
            f()
            sync(device)
            out.append(time.perf_counter() - t0)
    return ta, tb


def summary(ta: list[float], tb: list[float], per: int) -> dict[str, float]:
    """Medians per unit (`per` units per run) and the ratio baseline / 4-tensor two ways."""
    med_a, med_b = statistics.median(ta) / per, statistics.median(tb) / per
    return {
        "four_tensor_s": med_a,
        "baseline_s": med_b,
        "ratio_of_medians": med_b / med_a,
        "median_pair_ratio": statistics.median(b / a for a, b in zip(ta, tb)),
        "runs": len(ta),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    dev = args.device
    ft_cfg = FourTensorConfig(
        vocab_size=args.vocab, d_x=args.d_x, d_t=args.d_t, n_heads=args.heads, n_layers=args.layers,
        N=args.N, T=args.T, dropout=0.1,
    )
    bl_cfg = BaselineConfig.from_predictor(ft_cfg)
    four = FourTensorModel(ft_cfg).to(dev)
    base = BaselineModel(bl_cfg).to(dev)
    n_four = sum(p.numel() for p in four.parameters())
    n_base = sum(p.numel() for p in base.parameters())
    print(f"config: d_x={args.d_x} d_t={args.d_t} (d={ft_cfg.d}) N={args.N} T={args.T} |V|={args.vocab} "
          f"L={args.layers} H={args.heads}; params 4-tensor {n_four / 1e6:.2f}M, baseline {n_base / 1e6:.2f}M; "
          f"threads={args.threads} device={dev}")

    results: dict[str, dict] = {}
    sample = make_windows(256, args.T, args.N, args.vocab, args.pad_fraction, g)
    live_prefix = 1.0 + float((sample[:, : args.T] != 0).sum(dim=(1, 2)).float().mean())
    macs = macs_per_state(args, live_prefix)
    print(f"mean live prefix {live_prefix:.1f} tokens; multiply-adds per predicted state: 4-tensor "
          f"{macs['four_tensor'] / 1e6:.1f}M, baseline {macs['baseline'] / 1e6:.1f}M")
    four.eval()
    base.eval()
    for B in args.batches:
        prefix = make_windows(B, args.T, args.N, args.vocab, args.pad_fraction, g)[:, : args.T].to(dev)

        def run_four(prefix=prefix) -> None:
            with torch.no_grad():
                four.predict_next(prefix)

        def run_base(prefix=prefix) -> None:
            # Exactly N greedy tokens with the KV cache (an untrained model rarely emits [EOS]; force N anyway).
            with torch.no_grad():
                res = base.free_run(base.pack(prefix), n_steps=args.N)
                base._decode(res.tokens)

        ta, tb = interleaved(run_four, run_base, args.repeats, args.warmup, dev)
        results[f"infer_b{B}"] = summary(ta, tb, per=B)  # seconds per predicted state
        r = results[f"infer_b{B}"]
        print(f"inference B={B:<3d} per state: 4-tensor {r['four_tensor_s'] * 1e3:8.3f} ms  baseline "
              f"{r['baseline_s'] * 1e3:8.3f} ms  ratio {r['ratio_of_medians']:.1f}x (pairs {r['median_pair_ratio']:.1f}x)")

    windows = make_windows(args.train_batch, args.T, args.N, args.vocab, args.pad_fraction, g).to(dev)
    four.train()
    base.train()
    opt_four = torch.optim.AdamW(four.parameters(), lr=3e-4, weight_decay=0.01)
    opt_base = torch.optim.AdamW(base.parameters(), lr=3e-4, weight_decay=0.01)

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=True)
        model.training_step(windows).backward()
        opt.step()

    ta, tb = interleaved(lambda: step(four, opt_four), lambda: step(base, opt_base), args.train_repeats,
                         args.warmup, dev)
    tr = summary(ta, tb, per=args.train_batch)  # seconds per window
    results["train"] = {
        "four_tensor_windows_per_s": 1.0 / tr["four_tensor_s"],
        "baseline_windows_per_s": 1.0 / tr["baseline_s"],
        "ratio_of_medians": tr["ratio_of_medians"],
        "median_pair_ratio": tr["median_pair_ratio"],
        "runs": tr["runs"],
    }
    t = results["train"]
    print(f"training B={args.train_batch}: 4-tensor {t['four_tensor_windows_per_s']:8.1f} windows/s  baseline "
          f"{t['baseline_windows_per_s']:8.1f} windows/s  ratio {t['ratio_of_medians']:.1f}x "
          f"(pairs {t['median_pair_ratio']:.1f}x)")

    meta = {
        "command": "python bench/predictor_speed.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "markdown")},
        "params": {"four_tensor": n_four, "baseline": n_base},
        "macs_per_state": macs,
        "mean_live_prefix_tokens": live_prefix,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "threads": args.threads, "device": dev},
    }
    table = markdown_table(results, args, macs)
    print()
    print(table)
    for path in (args.json, args.markdown):
        path.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**meta, "results": results}, indent=2) + "\n")
    args.markdown.write_text(table + "\n")
    print(f"\nwrote {args.json} and {args.markdown}")
    return 0


def markdown_table(results: dict[str, dict], args: argparse.Namespace, macs: dict[str, float]) -> str:
    rows = [
        "| measurement | 4-tensor | baseline | ratio of medians | median of pair ratios |",
        "|---|---:|---:|---:|---:|",
    ]
    for B in args.batches:
        r = results[f"infer_b{B}"]
        rows.append(
            f"| time per predicted state, batch {B} | {r['four_tensor_s'] * 1e3:.3f} ms | "
            f"{r['baseline_s'] * 1e3:.3f} ms | {r['ratio_of_medians']:.1f}x | {r['median_pair_ratio']:.1f}x |"
        )
    t = results["train"]
    rows.append(
        f"| training windows/s, batch {args.train_batch} | {t['four_tensor_windows_per_s']:.1f} | "
        f"{t['baseline_windows_per_s']:.1f} | {t['ratio_of_medians']:.1f}x | {t['median_pair_ratio']:.1f}x |"
    )
    rows.append(
        f"| multiply-adds per predicted state | {macs['four_tensor'] / 1e6:.1f}M | {macs['baseline'] / 1e6:.1f}M | "
        f"{macs['baseline'] / macs['four_tensor']:.2f}x | |"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
