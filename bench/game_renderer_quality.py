"""A game renderer's quality on held-out screens: frames drawn from the states of test-split clips (the split no
training run reads), against the recorded screens: PSNR, SSIM, each object's distance from its true place
(found by its colour, `Game.locate`) and the round trip through the game's captioner, whole state and by field;
and, as the round trip's ceiling, the captioner's read of the recorded screens themselves. Several renderer folders
are scored on the same frames, side by side.

    python -m bench.game_renderer_quality --domain pong \
        --renderers weights/pong/renderer runs/pong-rend-ft/best --frames 512
    python -m bench.game_renderer_quality --domain freeway --warmup 1750 --frames 512
    python -m bench.game_renderer_quality --domain pong --steps 1 2 4    # the same renderer at 1, 2 and 4 steps
    python -m bench.game_renderer_quality --domain freeway --warmup 1750 --strip docs/img/freeway_renderer_strip.png

The clips are recorded once into --data (default runs/bench/<domain>-<split>-<seed>[-w<warmup>]-<clips>clips) and
decoded from MP4, as the renderer's training reads its own.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from bench.record import add_record_flags, write_record
from pipeline.captioner import Captioner
from pipeline.domain import get_domain
from pipeline.evaluation.metrics import caption_scores, evaluate_screens
from pipeline.renderer import Renderer
from pipeline.training.recorded_frames import record_frames

CLIP_LENGTH = 64


def write_strip(path: Path, screens: list[np.ndarray], drawn: list[np.ndarray], columns: int = 8) -> None:
    """A PNG of `columns` frames spread through the set: the recorded screens in the top row, the same states
    drawn in the bottom one, 4 white pixels apart."""
    picks = np.linspace(0, len(screens) - 1, columns).round().astype(int)

    def row(frames: list[np.ndarray]) -> np.ndarray:  # (H, columns * W + gaps, 3)
        gap = np.full((frames[0].shape[0], 4, 3), 255, np.uint8)
        return np.concatenate([x for i in picks for x in (gap, frames[i])][1:], axis=1)

    top, bottom = row(screens), row(drawn)
    strip = np.concatenate([top, np.full((4, top.shape[1], 3), 255, np.uint8), bottom], axis=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(strip).save(path)
    print(f"strip: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domain", default="pong", help="a recording domain (default %(default)s)")
    ap.add_argument("--renderers", nargs="+", type=Path, default=None,
                    help="renderer folders (default: weights/<domain>/renderer)")  # fmt: skip
    ap.add_argument("--captioner", type=Path, default=None, help="default: weights/<domain>/captioner")
    ap.add_argument("--frames", type=int, default=512, help="held-out frames, spread through the clips")
    ap.add_argument("--split", default="test", help="the clips' split (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="the clips' seed (default %(default)s)")
    ap.add_argument("--data", type=Path, default=None, help="where the clips are recorded (reused if there)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="the most steps played before a clip (default: the domain's; Freeway's renderer "
                         "trains on 1750, every phase of a game)")  # fmt: skip
    ap.add_argument("--steps", type=int, nargs="+", default=None,
                    help="denoising steps to draw with, each scored (default: each renderer's own)")  # fmt: skip
    ap.add_argument("--strip", type=Path, default=None,
                    help="write a PNG of 8 of the frames: recorded screens above, the last renderer's below")  # fmt: skip
    add_record_flags(ap, threads=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    domain = get_domain(args.domain)
    renderers = args.renderers or [Path("weights") / args.domain / "renderer"]
    captioner = Captioner.from_pretrained(
        args.captioner or Path("weights") / args.domain / "captioner", domain=domain
    )
    warm = "" if args.warmup is None else f"-w{args.warmup}"
    clips = -(-args.frames // CLIP_LENGTH)
    data = args.data or Path("runs/bench") / f"{args.domain}-{args.split}-{args.seed}{warm}-{clips}clips"
    held = record_frames(
        domain, data, clips=clips, length=CLIP_LENGTH, seed=args.seed, split=args.split, warmup=args.warmup
    )
    held = held.spread(args.frames)
    read = captioner.caption(list(held.frames))
    truth_read = caption_scores(domain, [r.strip() for r in read], [s.strip() for s in held.states])
    print(
        f"the captioner on the recorded screens: {truth_read['exact_match']:.1%} exact (the round trip's ceiling)"
    )
    results = {}
    for folder in renderers:
        renderer = Renderer.from_pretrained(folder)
        for steps in args.steps or [renderer.default_steps]:
            t = time.perf_counter()
            generator = torch.Generator("cpu").manual_seed(args.seed)
            frames = renderer.render(held.states, generator=generator, steps=steps)
            seconds = time.perf_counter() - t
            metrics = evaluate_screens(domain, held.states, frames, list(held.frames), captioner)
            metrics["seconds_per_frame"] = seconds / len(frames)
            name = f"{folder} ({steps} step{'' if steps == 1 else 's'})"
            results[name] = metrics
            drawn = frames
            print(f"{name}: round trip {metrics['roundtrip_acc']:.1%}, PSNR {metrics['psnr']:.2f} dB, "
                  f"SSIM {metrics['ssim']:.4f}, {1000 * metrics['seconds_per_frame']:.0f} ms a frame")  # fmt: skip
    if args.strip:
        write_strip(args.strip, list(held.frames), drawn)
    keys = sorted({k for m in results.values() for k in m})
    print("\n| metric | " + " | ".join(str(f) for f in results) + " |")
    print("|---|" + "---|" * len(results))
    for k in keys:
        cells = [results[f].get(k) for f in results]
        print(f"| {k} | " + " | ".join("" if v is None else f"{v:.4g}" for v in cells) + " |")
    if args.out:
        write_record(args.out, args, frames=len(held), captioner_on_screens=truth_read, results=results)
    else:
        print(json.dumps({"frames": len(held)}))


if __name__ == "__main__":
    main()
