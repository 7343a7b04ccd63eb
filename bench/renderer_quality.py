"""The shipped renderer's quality table of weights/README.md: round trip, PSNR, SSIM and the layout/shape checks
on distinct test-split world states, at several step counts, read back by the shipped captioner.

SSIM is `pipeline.evaluation.metrics.ssim` (torchmetrics' Gaussian 11x11, sigma 1.5). The two SSIMs the code
had before (the trainer's Gaussian over the valid region only, `semworld eval world`'s uniform 7x7) are printed
beside it on the same frames, so the figures written with them can be restated.

    python -m bench.renderer_quality --states 200 --seed 2000 --steps 2 4 8

`--set varied` scores instead a fixed validation set of varied scenes: the six states without objects
and `--per-count` distinct random valid scenes each of 1, 2 and 3 objects (uniform identities and cells, screen
and lamp drawn as the renderer's training pool draws them), and reports the round trip and PSNR by object count,
screen and lamp:

    python -m bench.renderer_quality --set varied --per-count 100 --steps 1 2 4 8 --guidance 1 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench.record import add_record_flags, write_record
from pipeline.captioner import Captioner
from pipeline.domain import get_domain
from pipeline.evaluation.metrics import evaluate_frames, psnr, scene_groups
from pipeline.renderer import Renderer
from pipeline.training.renderer_parts import VARIED_SEED, eval_states, varied_states


def ssim_gaussian_valid(a: np.ndarray, b: np.ndarray) -> float:
    """The renderer trainer's former SSIM: 11x11 Gaussian (sigma 1.5), valid region only."""
    x = torch.from_numpy(a).double().permute(2, 0, 1)[:, None]
    y = torch.from_numpy(b).double().permute(2, 0, 1)[:, None]
    g = torch.exp(-((torch.arange(11, dtype=torch.float64) - 5) ** 2) / (2 * 1.5**2))
    w = ((g / g.sum())[:, None] * (g / g.sum())[None, :])[None, None]
    mx, my = F.conv2d(x, w), F.conv2d(y, w)
    vx, vy, cxy = F.conv2d(x * x, w) - mx**2, F.conv2d(y * y, w) - my**2, F.conv2d(x * y, w) - mx * my
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    return float((((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))).mean())


def ssim_uniform7(a: np.ndarray, b: np.ndarray) -> float:
    """`semworld eval world`'s former SSIM: 7x7 uniform windows."""
    x = torch.from_numpy(a).double().permute(2, 0, 1)[:, None]
    y = torch.from_numpy(b).double().permute(2, 0, 1)[:, None]
    mean = lambda t: F.avg_pool2d(t, 7, stride=1)  # noqa: E731
    mx, my = mean(x), mean(y)
    vx, vy, cxy = mean(x * x) - mx**2, mean(y * y) - my**2, mean(x * y) - mx * my
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    return float((((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", type=Path, default=Path(__file__).resolve().parents[1] / "weights")
    ap.add_argument("--states", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2000, help="seed of the test-split states (eval_states)")
    ap.add_argument("--steps", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument(
        "--guidance",
        type=float,
        nargs="+",
        default=[None],
        help="guidance scales (default: the renderer's); each is run at every step count",
    )
    ap.add_argument(
        "--set",
        dest="state_set",
        choices=("test", "varied"),
        default="test",
        help="test: --states distinct test-split states (seed --seed); varied: the fixed varied set",
    )
    ap.add_argument("--per-count", type=int, default=100, help="varied set: states per object count 1, 2, 3")
    ap.add_argument(
        "--varied-seed",
        type=int,
        default=VARIED_SEED,
        help="varied set's seed (the reported one; the renderer's training chose best/ on seed 1000)",
    )
    add_record_flags(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import world

    renderer = Renderer.from_pretrained(args.weights / "renderer", device="cpu")
    captioner = Captioner.from_pretrained(
        args.weights / "captioner", device="cpu", domain=get_domain("shapes")
    )
    if args.state_set == "test":
        states = eval_states(args.seed, args.states)
    else:
        states = varied_states(args.per_count, args.varied_seed)
    groups = scene_groups(states)
    print(
        json.dumps(
            {"set": args.state_set, "states": len(states), "by_scene": {k: len(v) for k, v in groups.items()}}
        ),
        flush=True,
    )
    rows = []
    for guidance in args.guidance:
        for steps in args.steps:
            t = time.perf_counter()
            frames: list[np.ndarray] = []
            generator = torch.Generator("cpu").manual_seed(0)
            for i in range(0, len(states), 16):
                frames += renderer.render(
                    states[i : i + 16], generator=generator, steps=steps, guidance=guidance
                )
            seconds = (time.perf_counter() - t) / len(states)
            m = evaluate_frames(states, frames, captioner)
            truth = [world.render_state(s, size=f.shape[0]) for s, f in zip(states, frames)]
            m["ssim_former_trainer"] = float(
                np.mean([ssim_gaussian_valid(a, b) for a, b in zip(truth, frames)])
            )
            m["ssim_former_eval_world"] = float(np.mean([ssim_uniform7(a, b) for a, b in zip(truth, frames)]))
            read = captioner.caption(list(frames))
            hits = [r.strip() == s.strip() for r, s in zip(read, states)]
            row = {
                "steps": steps,
                "guidance": guidance,
                "s_per_frame": round(seconds, 4),
                **{k: round(v, 4) for k, v in m.items()},
            }
            row["roundtrip_by_scene"] = {
                k: round(float(np.mean([hits[i] for i in idx])), 4) for k, idx in groups.items()
            }
            row["psnr_by_scene"] = {k: round(psnr(np.stack([truth[i] for i in idx]),
                                                  np.stack([frames[i] for i in idx])), 2)
                                    for k, idx in groups.items()}  # fmt: skip
            row["misread"] = [(s, r) for s, r, h in zip(states, read, hits) if not h][:12]
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out is not None:
        write_record(args.out, args, rows=rows)


if __name__ == "__main__":
    main()
