"""Speed of the 4-tensor predictor against the 1-D GPT-2 baseline: time per predicted state and training windows/s.

Both models have the same width d = d_x*d_t, depth and heads. The 4-tensor model predicts S(T) in one parallel
forward of the window; the baseline decodes S(T) greedily, one token after another with its KV cache: N tokens
(forced), and, as a second row, the gold length of S(T) plus [EOS] (what a trained model that stops at [EOS]
would do). Training is forward + backward + AdamW step (the baseline with its free-running loop of section 7.4).
The models' runs are interleaved (A B A B ...) because this machine's speed swings from second to second; medians
are reported, with the ratio of the medians and the median of the ratios of adjacent pairs, for wall time and for
the CPU time of the process (steadier when other jobs share the cores). Multiply-adds are counted from the matrix
products the calls actually run (torch.utils.flop_counter), not from a formula.

    .venv/bin/python -m bench.predictor_speed                 # mid-size CPU config, ~2-3 minutes
    .venv/bin/python -m bench.predictor_speed --preset small  # a named preset (models/presets.py) instead of flags
    .venv/bin/python -m bench.predictor_speed --d-x 64 --d-t 32 --vocab 36711 --layers 2 --heads 4   # paper size
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
from torch.utils.flop_counter import FlopCounterMode

from models.baseline import BaselineConfig, BaselineModel
from models.four_tensor import FourTensorConfig, FourTensorModel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--preset", default=None, help="take d_x d_t N T |V| L H from this preset (models/presets.py)"
    )
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
    p.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1 is steadiest on a shared box)"
    )
    p.add_argument(
        "--pad-fraction", type=float, default=0.39, help="mean padding fraction (ROCStories: 0.3876)"
    )
    p.add_argument("--mac-windows", type=int, default=256, help="windows the multiply-adds are averaged over")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, default=Path("runs/bench/predictor_speed.json"), help="JSON output")
    p.add_argument(
        "--markdown", type=Path, default=Path("runs/bench/predictor_speed.md"), help="markdown table"
    )
    args = p.parse_args(argv)
    if args.preset is not None:
        from models.presets import get_preset

        pr = get_preset(args.preset).dims
        args.d_x, args.d_t, args.N, args.T = pr.d_x, pr.d_t, pr.N, pr.T
        args.vocab, args.layers, args.heads = pr.vocab_size, pr.n_layers, pr.n_heads
    return args


def make_windows(B: int, T: int, N: int, vocab: int, pad_fraction: float, g: torch.Generator) -> torch.Tensor:
    """(B, T+1, N) random windows; each sentence keeps a random number of leading tokens (mean ~ 1-pad_fraction)."""
    ids = torch.randint(1, vocab, (B, T + 1, N), generator=g)
    mean_len = max(1.0, (1.0 - pad_fraction) * N)
    lo, hi = max(1, round(2 * mean_len - N)), N  # uniform lengths with the requested mean
    lengths = torch.randint(lo, hi + 1, (B, T + 1), generator=g)
    slots = torch.arange(N)
    return ids.masked_fill(slots[None, None, :] >= lengths[..., None], 0)


def _sdpa_flops(q, k, v, *args, out_shape=None, **kwargs) -> int:
    """Flops of the CPU flash-attention kernel (QK^T and AV), which torch's counter does not know."""
    B, H, Lq, E = q
    return 2 * 2 * B * H * Lq * k[-2] * E


def _sdpa_backward_flops(grad_out, q, k, v, *args, out_shape=None, **kwargs) -> int:
    """Its backward: dV, dP, dQ, dK, twice the forward (torch's convention for the other SDPA kernels)."""
    return 2 * _sdpa_flops(q, k, v)


FLOP_RULES = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward_flops,
}


def count_macs(fn: Callable[[], object]) -> float:
    """Multiply-adds of the matrix products fn runs (matmul, linear, bmm, attention), forward and backward."""
    with FlopCounterMode(display=False, custom_mapping=FLOP_RULES) as counter:
        fn()
    return counter.get_total_flops() / 2


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(fns: list[Callable[[int], object]], repeats: int, warmup: int, device: str):
    """Run fns[0](r), fns[1](r), ... for r = 0, 1, ... and return, per function, the wall and CPU seconds of each
    run. Every function of round r gets the same r (the same input), so adjacent runs form matched pairs."""
    for _ in range(warmup):
        for f in fns:
            f(0)
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        for f, w, c in zip(fns, wall, cpu):
            sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            f(r)
            sync(device)
            w.append(time.perf_counter() - t0)
            c.append(time.process_time() - c0)
    return wall, cpu


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


def gold_steps(full: torch.Tensor, N: int) -> int:
    """Greedy steps a trained baseline takes on these windows (B, T+1, N): the longest gold S(T), then [EOS]."""
    return min(N, int((full[:, -1] != 0).sum(dim=1).max()) + 1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    dev = args.device
    ft_cfg = FourTensorConfig(
        vocab_size=args.vocab,
        d_x=args.d_x,
        d_t=args.d_t,
        n_heads=args.heads,
        n_layers=args.layers,
        N=args.N,
        T=args.T,
        dropout=0.1,
    )
    bl_cfg = BaselineConfig.from_predictor(ft_cfg)
    four = FourTensorModel(ft_cfg).to(dev)
    base = BaselineModel(bl_cfg).to(dev)
    n_four = sum(p.numel() for p in four.parameters())
    n_base = sum(p.numel() for p in base.parameters())
    print(
        f"config: d_x={args.d_x} d_t={args.d_t} (d={ft_cfg.d}) N={args.N} T={args.T} |V|={args.vocab} "
        f"L={args.layers} H={args.heads}; params 4-tensor {n_four / 1e6:.2f}M, baseline {n_base / 1e6:.2f}M; "
        f"threads={args.threads} device={dev}"
    )

    results: dict[str, dict] = {}
    sample = make_windows(args.mac_windows, args.T, args.N, args.vocab, args.pad_fraction, g)
    live_prefix = 1.0 + float((sample[:, : args.T] != 0).sum(dim=(1, 2)).float().mean())
    four.eval()
    base.eval()

    def predict_four(prefix: torch.Tensor) -> None:
        with torch.inference_mode():
            four.predict_next(prefix)

    def predict_base(prefix: torch.Tensor, n_steps: int) -> None:
        # A fixed number of greedy tokens with the KV cache (an untrained model rarely emits [EOS]).
        with torch.inference_mode():
            res = base.free_run(base.pack(prefix), n_steps=n_steps)
            base._decode(res.tokens)

    # Multiply-adds per predicted state, counted on the 256 sample windows (batch 64 at a time).
    macs = {"four_tensor": 0.0, "baseline": 0.0, "baseline_gold": 0.0}
    for chunk in sample.split(64):
        prefix = chunk[:, : args.T].to(dev)
        macs["four_tensor"] += count_macs(lambda prefix=prefix: predict_four(prefix)) / len(sample)
        macs["baseline"] += count_macs(lambda prefix=prefix: predict_base(prefix, args.N)) / len(sample)
        for row in chunk.split(1):  # one window at a time: each stops at its own [EOS]
            macs["baseline_gold"] += count_macs(
                lambda row=row: predict_base(row[:, : args.T].to(dev), gold_steps(row, args.N))
            ) / len(sample)
    print(
        f"mean live prefix {live_prefix:.1f} tokens; multiply-adds per predicted state: 4-tensor "
        f"{macs['four_tensor'] / 1e6:.1f}M, baseline {macs['baseline'] / 1e6:.1f}M (N tokens), "
        f"{macs['baseline_gold'] / 1e6:.1f}M (gold length + [EOS])"
    )

    for B in args.batches:
        # A fresh batch of windows for every round (the same one for all models of that round).
        fulls = [
            make_windows(B, args.T, args.N, args.vocab, args.pad_fraction, g).to(dev)
            for _ in range(args.repeats)
        ]
        steps = [gold_steps(full, args.N) for full in fulls]
        fns = [
            lambda r, fulls=fulls: predict_four(fulls[r][:, : args.T]),
            lambda r, fulls=fulls: predict_base(fulls[r][:, : args.T], args.N),
            lambda r, fulls=fulls, steps=steps: predict_base(fulls[r][:, : args.T], steps[r]),
        ]
        wall, cpu = interleaved(fns, args.repeats, args.warmup, dev)
        for key, k in (("", 1), ("_gold", 2)):
            results[f"infer_b{B}{key}"] = summary(wall[0], wall[k], per=B)  # seconds per predicted state
            results[f"infer_b{B}{key}"]["cpu"] = summary(cpu[0], cpu[k], per=B)
        results[f"infer_b{B}_gold"]["baseline_steps"] = statistics.mean(steps)
        for key, what in (
            ("", f"{args.N} tokens"),
            ("_gold", f"{statistics.mean(steps):.1f} tokens on average"),
        ):
            r = results[f"infer_b{B}{key}"]
            print(
                f"inference B={B:<3d} per state: 4-tensor {r['four_tensor_s'] * 1e3:8.3f} ms  baseline "
                f"{r['baseline_s'] * 1e3:8.3f} ms ({what})  ratio {r['ratio_of_medians']:.1f}x "
                f"(pairs {r['median_pair_ratio']:.1f}x, cpu {r['cpu']['ratio_of_medians']:.1f}x)"
            )

    windows = make_windows(args.train_batch, args.T, args.N, args.vocab, args.pad_fraction, g).to(dev)
    four.train()
    base.train()
    opt_four = torch.optim.AdamW(four.parameters(), lr=3e-4, weight_decay=0.01)
    opt_base = torch.optim.AdamW(base.parameters(), lr=3e-4, weight_decay=0.01)

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=True)
        model.training_step(windows).backward()
        opt.step()

    train_macs = {
        "four_tensor": count_macs(lambda: four.training_step(windows).backward()) / args.train_batch,
        "baseline": count_macs(lambda: base.training_step(windows).backward()) / args.train_batch,
    }
    wall, cpu = interleaved(
        [lambda r: step(four, opt_four), lambda r: step(base, opt_base)], args.train_repeats, args.warmup, dev
    )
    results["train"] = {}
    for key, times in (("", wall), ("cpu_", cpu)):
        tr = summary(times[0], times[1], per=args.train_batch)  # seconds per window
        results["train"].update(
            {
                f"{key}four_tensor_windows_per_s": 1.0 / tr["four_tensor_s"],
                f"{key}baseline_windows_per_s": 1.0 / tr["baseline_s"],
                f"{key}ratio_of_medians": tr["ratio_of_medians"],
                f"{key}median_pair_ratio": tr["median_pair_ratio"],
            }
        )
    results["train"]["runs"] = len(wall[0])
    t = results["train"]
    print(
        f"training B={args.train_batch}: 4-tensor {t['four_tensor_windows_per_s']:8.1f} windows/s  baseline "
        f"{t['baseline_windows_per_s']:8.1f} windows/s  ratio {t['ratio_of_medians']:.1f}x "
        f"(pairs {t['median_pair_ratio']:.1f}x, cpu {t['cpu_ratio_of_medians']:.1f}x)"
    )

    meta = {
        "command": "python -m bench.predictor_speed " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "markdown")},
        "params": {"four_tensor": n_four, "baseline": n_base},
        "macs_per_state": macs,
        "macs_per_training_window": train_macs,
        "mean_live_prefix_tokens": live_prefix,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": args.threads,
            "device": dev,
            "loadavg": list(os.getloadavg()),
        },
    }
    table = markdown_table(results, args, macs, train_macs)
    print()
    print(table)
    for path in (args.json, args.markdown):
        path.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**meta, "results": results}, indent=2) + "\n")
    args.markdown.write_text(table + "\n")
    print(f"\nwrote {args.json} and {args.markdown}")
    return 0


def markdown_table(
    results: dict[str, dict], args: argparse.Namespace, macs: dict[str, float], train_macs: dict[str, float]
) -> str:
    rows = [
        "| measurement | 4-tensor | baseline | ratio of medians | median of pair ratios | ratio of CPU-time medians |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for B in args.batches:
        for key in ("", "_gold"):
            r = results[f"infer_b{B}{key}"]
            what = f"{args.N} tokens" if not key else f"gold length + [EOS], {r['baseline_steps']:.1f} tokens"
            rows.append(
                f"| time per predicted state, batch {B} (baseline {what}) | {r['four_tensor_s'] * 1e3:.3f} ms | "
                f"{r['baseline_s'] * 1e3:.3f} ms | {r['ratio_of_medians']:.1f}x | {r['median_pair_ratio']:.1f}x | "
                f"{r['cpu']['ratio_of_medians']:.1f}x |"
            )
    t = results["train"]
    rows.append(
        f"| training windows/s, batch {args.train_batch} | {t['four_tensor_windows_per_s']:.1f} | "
        f"{t['baseline_windows_per_s']:.1f} | {t['ratio_of_medians']:.1f}x | {t['median_pair_ratio']:.1f}x | "
        f"{t['cpu_ratio_of_medians']:.1f}x |"
    )
    rows.append(
        f"| multiply-adds per predicted state (baseline {args.N} tokens) | {macs['four_tensor'] / 1e6:.1f}M | "
        f"{macs['baseline'] / 1e6:.1f}M | {macs['baseline'] / macs['four_tensor']:.2f}x | | |"
    )
    rows.append(
        f"| multiply-adds per predicted state (baseline gold length + [EOS]) | {macs['four_tensor'] / 1e6:.1f}M | "
        f"{macs['baseline_gold'] / 1e6:.1f}M | {macs['baseline_gold'] / macs['four_tensor']:.2f}x | | |"
    )
    rows.append(
        f"| multiply-adds per training window (fwd + bwd) | {train_macs['four_tensor'] / 1e6:.1f}M | "
        f"{train_macs['baseline'] / 1e6:.1f}M | {train_macs['baseline'] / train_macs['four_tensor']:.2f}x | | |"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
