"""SSIM of frames: semworld's separable-window SSIM (`pipeline.evaluation.metrics.ssim`) against torchmetrics'
Gaussian SSIM with the same settings, side by side in one process on the same pairs of screens, with the largest
difference between their values.

    .venv/bin/python -m bench.ssim_speed                       # Pong-sized screens (210 x 160), 32 pairs
    .venv/bin/python -m bench.ssim_speed --size 128 128 --pairs 64 --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    import torch
    from torchmetrics.functional.image import structural_similarity_index_measure

    from pipeline.evaluation.metrics import ssim

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, nargs=2, default=(210, 160), metavar=("H", "W"))
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ns = ap.parse_args()
    torch.set_num_threads(ns.threads)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (ns.pairs, *ns.size, 3), dtype=np.uint8)  # (P, H, W, 3)
    b = np.clip(a.astype(int) + rng.integers(-20, 21, a.shape), 0, 255).astype(np.uint8)

    def library(x: np.ndarray, y: np.ndarray) -> float:
        tx = torch.tensor(x, dtype=torch.float64).permute(2, 0, 1)[None]  # (1, 3, H, W)
        ty = torch.tensor(y, dtype=torch.float64).permute(2, 0, 1)[None]
        return float(structural_similarity_index_measure(
            tx, ty, gaussian_kernel=True, sigma=1.5, kernel_size=11, data_range=255.0, k1=0.01, k2=0.03
        ))  # fmt: skip

    ssim(a[0], b[0]), library(a[0], b[0])  # warm up
    times = {}
    values = {}
    for name, fn in (("torchmetrics", library), ("separable", ssim)):
        t = time.perf_counter()
        values[name] = [fn(x, y) for x, y in zip(a, b)]
        times[name] = (time.perf_counter() - t) / ns.pairs
    gap = max(abs(p - q) for p, q in zip(values["torchmetrics"], values["separable"]))
    print(f"{ns.pairs} pairs of {ns.size[0]} x {ns.size[1]} x 3, {ns.threads} thread(s)")
    print(f"torchmetrics (11 x 11 window)  {times['torchmetrics'] * 1000:8.1f} ms a pair")
    print(f"separable (11 + 11 taps)       {times['separable'] * 1000:8.1f} ms a pair")
    print(f"speed-up {times['torchmetrics'] / times['separable']:.1f}x; largest difference {gap:.1e}")


if __name__ == "__main__":
    main()
