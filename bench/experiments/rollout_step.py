"""The rollout step on the CPU: the packed predict_next (skips padding slots; asks the host how many are live)
against the fixed-shape decode_step (no host round trip: the GPU path), both with the readout matrix M made once,
interleaved A B A B on the same windows; medians and their ratio.

    .venv/bin/python -m bench.experiments.rollout_step      # preset small, |V| 2000, batches 1 and 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.predictor_speed import make_windows
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = four_tensor_config(args.preset, vocab_size=args.vocab)
    model = FourTensorModel(cfg).eval()
    M = model.readout_matrix()
    print(
        f"preset {args.preset}, |V| {args.vocab}, {args.threads} thread(s), {args.repeats} interleaved pairs"
    )
    print("| batch | packed predict_next | fixed-shape decode_step | fixed / packed |\n|---|---:|---:|---:|")
    with torch.inference_mode():
        for B in args.batches:
            windows = [
                make_windows(B, cfg.T, cfg.N, args.vocab, 0.39, g)[:, : cfg.T] for _ in range(args.repeats)
            ]
            assert torch.equal(
                model.predict_next(windows[0], readout=M)[0], model.decode_step(windows[0], M)[0]
            )
            packed, fixed = [], []
            for w in windows:
                t = time.perf_counter()
                model.predict_next(w, readout=M)
                packed.append(time.perf_counter() - t)
                t = time.perf_counter()
                model.decode_step(w, M)
                fixed.append(time.perf_counter() - t)
            a, b = statistics.median(packed), statistics.median(fixed)
            print(f"| {B} | {a * 1e3:.3f} ms | {b * 1e3:.3f} ms | {b / a:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
