"""Calibrate the captioner's confidence threshold: world frames (in domain) vs real frames (out of domain).

    nice -n 10 python -m bench.caption_confidence [--weights weights] [--world 24]

Confidence is the captioner's mean log-probability per generated token (pipeline.captioner.caption_scored); a
state is "unsure" when it is below the threshold or does not parse under the shapes world's grammar. The threshold is the
value between the lowest world frame and the highest real frame (pipeline.confidence); the script prints how
many frames of each set it flags. Real frames: every frame of /work/shared/clips/bigbuckbunny.mp4 (or tests/assets' excerpt), the test
asset, and matplotlib's sample photograph (grace_hopper.jpg) with four crops. The numbers also go to
runs/bench/caption_confidence.json (--json); docs/api.md quotes them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def real_frames() -> dict[str, list[np.ndarray]]:
    from pipeline.video import VideoLimits, read_video

    sets: dict[str, list[np.ndarray]] = {}
    shared = Path("/work/shared/clips/bigbuckbunny.mp4")
    if shared.is_file():
        sets["bigbuckbunny 1280x720 (every frame)"] = read_video(
            shared, limits=VideoLimits(max_frames=1000)
        ).frames
    sets["tests/assets bigbuckbunny 160x90"] = read_video(
        REPO / "tests/assets/bigbuckbunny_160x90.mp4"
    ).frames
    try:
        import matplotlib.cbook
        from PIL import Image

        with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as fh:
            photo = np.asarray(Image.open(fh).convert("RGB"))
        h, w = photo.shape[:2]
        crops = [photo, photo[: h // 2], photo[h // 2 :], photo[:, : w // 2], photo[:, w // 2 :]]
        sets["photograph grace_hopper.jpg (+4 crops)"] = [np.ascontiguousarray(c) for c in crops]
    except (ImportError, FileNotFoundError, OSError):
        pass
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--weights", type=Path, default=REPO / "weights")
    parser.add_argument("--world", type=int, default=24, help="world test sequences (12 frames each)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="the threshold to report at (default: the shapes domain's confidence_threshold)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=REPO / "runs" / "bench" / "caption_confidence.json",
        help="where to write the numbers as JSON (default: runs/bench/caption_confidence.json)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    import world
    from pipeline.captioner import Captioner
    from pipeline.domain import get_domain, parses

    shapes = get_domain("shapes")
    captioner = Captioner.from_pretrained(args.weights / "captioner", device="cpu", domain=shapes)

    def score(frames: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        out = [r for i in range(0, len(frames), 16) for r in captioner.caption_scored(frames[i : i + 16])]
        return np.array([c for _, c in out]), np.array([parses(shapes, t) for t, _ in out])

    import tempfile

    from pipeline.video import read_video
    from world.video import generate

    world_frames = [f for f, _ in world.frames_and_states("all", args.world, seed=0, split="test")]
    with tempfile.TemporaryDirectory() as tmp:  # what users feed: clips from `world generate`, read at 2 Hz
        generate(tmp, "all", args.world, seed=0, split="test", workers=1, progress=False)
        decoded = [
            f for p in sorted(Path(tmp, "clips").glob("*.mp4")) for f in read_video(p, state_rate=2).frames
        ]
    rows = {
        "world test frames (rendered)": score(world_frames),
        "world test clips (H.264, 2 Hz)": score(decoded),
    }
    w_conf = np.concatenate([rows[k][0] for k in rows])
    threshold = shapes.confidence_threshold if args.threshold is None else args.threshold
    for name, frames in real_frames().items():
        rows[name] = score(frames)
    report = {"threshold": threshold, "world_p01": float(np.percentile(w_conf, 1)), "sets": {}}
    print(f"threshold {threshold:g}; world frames: 1st percentile {report['world_p01']:.4f}, "
          f"lowest {w_conf.min():.4f} (mean token log-prob)")  # fmt: skip
    print(
        f"{'set':40s} {'n':>4s} {'median':>8s} {'p01':>8s} {'p99':>8s} {'min':>8s} {'max':>8s} {'parses':>7s} {'below':>6s} {'unsure':>7s}"
    )
    for name, (conf, parsed) in rows.items():
        below = conf < threshold
        unsure = below | ~parsed
        stats = {
            "n": len(conf), "median": float(np.median(conf)), "p01": float(np.percentile(conf, 1)),
            "p99": float(np.percentile(conf, 99)), "min": float(conf.min()), "max": float(conf.max()), "parses": float(parsed.mean()), "below": float(below.mean()),
            "unsure": float(unsure.mean()),
        }  # fmt: skip
        report["sets"][name] = stats
        print(f"{name:40s} {stats['n']:4d} {stats['median']:8.4f} {stats['p01']:8.4f} {stats['p99']:8.4f} {stats['min']:8.4f} {stats['max']:8.4f} "
              f"{stats['parses']:7.1%} {stats['below']:6.1%} {stats['unsure']:7.1%}")  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
