"""Speed of the whole pipeline: median latency per stage and end to end for a 32-frame clip -> 8 predicted frames,
and frames per second of the captioner and renderer at several batch sizes.

The clip is the first 32 frames of a test-split world clip (128x128), sampled at stride 1 (32 captions). Weights
are the shipped `weights/` (or `--weights DIR`); `--tiny` times tiny randomly initialised stages of the same
classes instead (structure only: their numbers say what the plumbing costs, not the models). CUDA is used when
present unless `--device` says otherwise.

    .venv/bin/python -m bench.pipeline_speed                   # shipped weights, ~1-2 minutes on 2 CPU cores
    .venv/bin/python -m bench.pipeline_speed --tiny --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pipeline.video import VideoLimits, encode_mp4
from pipeline.world_model import WorldModelPipeline

STAGES = ("decode", "caption", "predict", "render", "encode", "total")


def world_clip(frames: int, size: int = 128) -> bytes:
    """The first `frames` frames of test-split world clips, encoded as H.264 MP4 bytes."""
    from world.scenarios import STRIDE, episode

    out: list[np.ndarray] = []
    index = 0
    while len(out) < frames:
        ep = episode("bounce", 0, index, length=12, split="test")
        out.extend(ep.frames(STRIDE, size))
        index += 1
    return encode_mp4(out[:frames], 10)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def stage_fps(
    pipe: WorldModelPipeline,
    clip_frames: list[np.ndarray],
    states: list[str],
    batches: list[int],
    repeats: int,
    device: str,
) -> dict[str, dict[int, float]]:
    """Frames per second of caption and render alone at each batch size (median of `repeats`)."""
    out: dict[str, dict[int, float]] = {"caption": {}, "render": {}}
    for b in batches:
        frames = (clip_frames * (b // len(clip_frames) + 1))[:b]
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            pipe.captioner.caption(frames)
            sync(device)
            times.append(time.perf_counter() - t)
        out["caption"][b] = b / statistics.median(times)
        todo = (states * (b // len(states) + 1))[:b]
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            pipe.renderer.render(todo, generator=torch.Generator("cpu").manual_seed(0))
            sync(device)
            times.append(time.perf_counter() - t)
        out["render"][b] = b / statistics.median(times)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=Path(__file__).resolve().parents[1] / "weights")
    ap.add_argument("--tiny", action="store_true", help="tiny random stages instead of the weights")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--horizon", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,8,32", help="batch sizes for the frames/s table")
    ap.add_argument("--json", type=Path, default=Path("runs/bench/pipeline_speed.json"))
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        weights = args.weights
        if args.tiny:
            from tests.fakes import build_tiny_weights

            weights = build_tiny_weights(Path(tmp) / "weights")
        pipe = WorldModelPipeline.from_pretrained(
            weights, device=device, limits=VideoLimits(max_frames=max(64, args.frames)),
            caption_batch_size=args.frames, render_batch_size=args.horizon,
        )  # fmt: skip
        clip = world_clip(args.frames)
        t = time.perf_counter()
        pipe.warmup()
        warmup_s = time.perf_counter() - t

        runs: list[dict[str, float]] = []
        for i in range(args.repeats + 1):
            out = pipe(clip, horizon=args.horizon, seed=0, encode_video=True)
            sync(device)
            if i:  # the first run is a warm-up
                runs.append(out.timings)
        medians = {s: statistics.median(r[s] for r in runs) for s in STAGES}
        fps = stage_fps(
            pipe,
            out.observed_frames[:8],
            out.predicted_states,
            [int(b) for b in args.batches.split(",")],
            max(3, args.repeats // 2),
            device,
        )

    result = {
        "weights": "tiny random stages" if args.tiny else str(args.weights),
        "device": device,
        "threads": args.threads,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
        "clip": f"{args.frames} frames 128x128 (world, test split), stride 1 -> {args.frames} captions",
        "horizon": args.horizon,
        "repeats": args.repeats,
        "warmup_s": warmup_s,
        "median_s": medians,
        "frames_per_s": fps,
        "observed_example": out.observed_states[:2],
        "predicted_example": out.predicted_states[:2],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")

    print(
        f"{result['weights']} on {device} ({args.threads} threads); {result['clip']}, horizon {args.horizon}"
    )
    print(f"median of {args.repeats} runs (after one warm-up run):")
    print("| stage | median |\n|---|---:|")
    for s in STAGES:
        print(f"| {s} | {medians[s] * 1000:.1f} ms |")
    print("\nframes per second by batch size:")
    print("| stage | " + " | ".join(f"batch {b}" for b in fps["caption"]) + " |")
    print("|---|" + "---:|" * len(fps["caption"]))
    for stage, row in fps.items():
        print(f"| {stage} | " + " | ".join(f"{v:.1f}" for v in row.values()) + " |")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
