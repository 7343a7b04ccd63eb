"""The GPU benchmark in one run (bench/gpu.sh calls it): everything into one folder as JSON + Markdown.

1. Predictor: bench/predictor_speed.py at the paper's matched scale (4-tensor H=4 L=2 vs the baseline L=2,
   preset paper-h4-l2, training batch 32) and at `small`: training windows/s, time per predicted state at batch
   1 and 64; then the rollout (pipeline.predictor.Predictor, k states) eager and compiled, with peak memory.
2. Model FLOP utilisation: the 4-tensor training step (forward + backward + AdamW) in bf16 autocast and in fp32,
   FLOPs counted from the matrix products it runs (torch.utils.flop_counter), against the matmul peak measured
   here (square bf16 and fp32 matmuls).
3. The pipeline: bench/pipeline_speed.py (a 32-frame clip -> 8 predicted frames, per stage, batch 1), and a batch
   of 16 clips through each stage at once (captions, predictions, renders): predicted frames per second.

    bench/gpu.sh [OUT]              # on a GPU box; OUT defaults to $OUT, else runs/bench/gpu
    bench/gpu.sh --dry-run [OUT]    # tiny sizes on the CPU: checks the script end to end (~1 minute)
    bench/gpu.sh --train [OUT]      # 4. then a short training burst of the shipped models into OUT/weights
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from bench import pipeline_speed, predictor_speed
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config, get_preset
from pipeline.predictor import Predictor

ROOT = Path(__file__).resolve().parents[1]

TARGETS = {  # the goals: ratios on the same GPU in the same run
    "state_b1_ratio": 15.0,
    "state_b64_ratio": 5.0,
    "train_ratio": 10.0,
    "mfu_bf16": 0.5,
    "pipeline_frames_per_s_b16": 100.0,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "out", nargs="?", type=Path, default=None, help="output folder (default: $OUT, else runs/bench/gpu)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="tiny sizes, few repeats: the script end to end on CPU"
    )
    p.add_argument("--train", action="store_true",
                   help="then a short training burst of the shipped models (the quick recipes of `semworld train all "
                   "--quick`) into OUT/weights, checkpoints in OUT/train-runs")  # fmt: skip
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument(
        "--skip", nargs="*", default=[], choices=("predictor", "mfu", "pipeline"), help="parts to skip"
    )
    args = p.parse_args(argv)
    args.out = args.out or Path(os.environ.get("OUT") or ROOT / "runs/bench/gpu")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return args


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_bytes(device: str) -> int | None:
    return int(torch.cuda.max_memory_allocated()) if device.startswith("cuda") else None


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int, device: str) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---- 1. the predictor ------------------------------------------------------------------------------------
def predictor_section(args: argparse.Namespace, sizes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, preset in sizes["presets"].items():
        reset_peak(args.device)
        t = time.perf_counter()
        json_path, md_path = args.out / f"predictor_{label}.json", args.out / f"predictor_{label}.md"
        predictor_speed.main([
            "--preset", preset, "--batches", *map(str, sizes["batches"]), "--train-batch", str(sizes["train_batch"]),
            "--repeats", str(sizes["repeats"]), "--train-repeats", str(sizes["train_repeats"]),
            "--warmup", "1", "--threads", str(args.threads), "--device", args.device,
            "--json", str(json_path), "--markdown", str(md_path), "--mac-windows", str(sizes["mac_windows"]),
        ])  # fmt: skip
        speed = json.loads(json_path.read_text())
        res = speed["results"]
        out[label] = {
            "preset": preset,
            "params": speed["params"],
            "train_windows_per_s": {
                k: res["train"][f"{k}_windows_per_s"] for k in ("four_tensor", "baseline")
            },
            "train_ratio": res["train"]["ratio_of_medians"],
            "state_s": {
                f"b{B}": {k: res[f"infer_b{B}"][f"{k}_s"] for k in ("four_tensor", "baseline")}
                for B in sizes["batches"]
            },  # fmt: skip
            "state_ratio": {f"b{B}": res[f"infer_b{B}"]["ratio_of_medians"] for B in sizes["batches"]},
            "state_ratio_gold": {
                f"b{B}": res[f"infer_b{B}_gold"]["ratio_of_medians"] for B in sizes["batches"]
            },
            "peak_memory_bytes": peak_bytes(args.device),
            "rollout": rollout_times(args, preset, sizes),
            "seconds": time.perf_counter() - t,
        }
    return out


def rollout_times(args: argparse.Namespace, preset: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """Time per predicted state of Predictor.predict_ids (k states, M once, the fixed-shape step), eager and
    compiled, at each batch size, with the peak memory of each."""
    pr = get_preset(preset).dims
    model = FourTensorModel(four_tensor_config(preset)).eval()
    tok = SimpleNamespace(vocab_size=pr.vocab_size)  # predict_ids reads ids only: no tokenizer is needed
    g = torch.Generator().manual_seed(0)
    k = sizes["rollout_k"]
    out: dict[str, Any] = {"k": k}
    # The dry run leaves compiling out: inductor takes minutes on a loaded CPU (tests/pipeline/
    # test_predictor_device.py checks compiled == eager there, marked slow).
    for compiled in (False,) if args.dry_run else (False, True):
        name = "compiled" if compiled else "eager"
        p = Predictor(model, tok, device=args.device, compile=compiled)  # type: ignore[arg-type]
        p.fixed_shapes = True  # the GPU path, also when the dry run is on the CPU
        for B in sizes["batches"]:
            window = predictor_speed.make_windows(B, pr.T, pr.N, tok.vocab_size, 0.39, g)[:, : pr.T]
            window = window.to(args.device)
            reset_peak(args.device)
            t = time.perf_counter()
            p.predict_ids(window, k)  # compiles here when asked (not timed below)
            sync(args.device)
            first = time.perf_counter() - t
            s = median_seconds(
                lambda p=p, window=window: p.predict_ids(window, k), sizes["repeats"], 1, args.device
            )
            out[f"{name}_b{B}"] = {"state_s": s / (k * B), "first_call_s": first,
                                   "fell_back_to_eager": compiled and p._compiled is None,
                                   "peak_memory_bytes": peak_bytes(args.device)}  # fmt: skip
    return out


# ---- 2. model FLOP utilisation ---------------------------------------------------------------------------
def matmul_peak(n: int, dtype: torch.dtype, device: str, repeats: int) -> float:
    """FLOP/s of an (n, n) @ (n, n) matmul in dtype: 2 n^3 per product, median of `repeats` batches of 10."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def ten() -> None:
        for _ in range(10):
            a @ b

    return 10 * 2 * n**3 / median_seconds(ten, repeats, 2, device)


def mfu_section(args: argparse.Namespace, sizes: dict[str, Any]) -> dict[str, Any]:
    dev = args.device
    peaks = {name: matmul_peak(sizes["matmul_n"], dt, dev, sizes["repeats"])
             for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32))}  # fmt: skip
    preset = sizes["presets"]["paper"]
    pr = get_preset(preset).dims
    torch.manual_seed(0)
    model = FourTensorModel(four_tensor_config(preset, dropout=0.1)).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    windows = predictor_speed.make_windows(sizes["train_batch"], pr.T, pr.N, pr.vocab_size, 0.39, g).to(dev)
    flops = 2 * predictor_speed.count_macs(lambda: model.training_step(windows).backward())  # per step
    out: dict[str, Any] = {"matmul_n": sizes["matmul_n"], "matmul_peak_flops": peaks, "preset": preset,
                           "train_batch": sizes["train_batch"], "flops_per_step": flops}  # fmt: skip
    for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):

        def step(dt: torch.dtype = dt) -> None:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(torch.device(dev).type, dtype=dt, enabled=dt != torch.float32):
                loss = model.training_step(windows)
            loss.backward()
            opt.step()

        reset_peak(dev)
        s = median_seconds(step, sizes["train_repeats"], 2, dev)
        out[name] = {"step_s": s, "windows_per_s": sizes["train_batch"] / s, "achieved_flops": flops / s,
                     "mfu": flops / s / peaks[name], "peak_memory_bytes": peak_bytes(dev)}  # fmt: skip
    return out


# ---- 3. the pipeline -------------------------------------------------------------------------------------
def pipeline_section(args: argparse.Namespace, sizes: dict[str, Any]) -> dict[str, Any]:
    from pipeline.video import VideoLimits
    from pipeline.world_model import WorldModelPipeline

    frames, horizon, clips = sizes["frames"], 8, sizes["clips"]
    json_path = args.out / "pipeline_b1.json"
    common = ["--frames", str(frames), "--horizon", str(horizon), "--device", args.device,
              "--threads", str(args.threads), "--repeats", str(sizes["pipeline_repeats"])]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        weights = ROOT / "weights"
        if args.dry_run:
            from tests.fakes import build_tiny_weights

            weights = build_tiny_weights(Path(tmp) / "weights")
        fps_batches = "1,2" if args.dry_run else "1,8,32"
        pipeline_speed.main(
            [*common, "--weights", str(weights), "--batches", fps_batches, "--json", str(json_path)]
        )
        b1 = json.loads(json_path.read_text())
        pipe = WorldModelPipeline.from_pretrained(weights, device=args.device,
                                                  limits=VideoLimits(max_frames=max(64, frames)),
                                                  caption_batch_size=frames, render_batch_size=horizon)  # fmt: skip
        out = pipe(pipeline_speed.world_clip(frames), horizon=horizon, seed=0)
        observed = [f for f in out.observed_frames]
        batch_frames = observed * clips  # 16 clips of 32 frames
        histories = [list(out.observed_states)] * clips
        timings: dict[str, float] = {}
        captions: list[str] = []
        predicted: list[list[str]] = []

        def caption() -> None:
            captions[:] = pipe.captioner.caption(batch_frames)

        def predict() -> None:
            predicted[:] = pipe.predictor.predict(histories, horizon, truncate=True)

        def render() -> None:
            todo = [s for row in predicted for s in row]  # clips * horizon states
            for i in range(0, len(todo), sizes["render_batch"]):
                pipe.renderer.render(todo[i : i + sizes["render_batch"]],
                                     generator=torch.Generator("cpu").manual_seed(0))  # fmt: skip

        for name, fn in (("caption", caption), ("predict", predict), ("render", render)):
            timings[name] = median_seconds(fn, sizes["pipeline_repeats"], 1, args.device)
    total = sum(timings.values())
    per_clip_b1 = b1["median_s"]["total"]
    return {
        "batch_1": {
            "median_s": b1["median_s"],
            "predicted_frames_per_s": horizon / per_clip_b1,
            "frames_per_s_by_batch": b1["frames_per_s"],
        },  # fmt: skip
        f"batch_{clips}_clips": {
            "stage_s": timings,
            "total_s": total,
            "predicted_frames_per_s": clips * horizon / total,
            "render_batch": sizes["render_batch"],
        },  # fmt: skip
        "clip": f"{frames} frames -> {horizon} predicted frames",
        "weights": "tiny random stages (dry run)" if args.dry_run else "weights/ (shipped)",
    }


# ---- 4. a training burst -----------------------------------------------------------------------------------
def train_burst(args: argparse.Namespace) -> dict[str, Any]:
    """`semworld train all --quick` on this device into OUT/weights (a smoke burst, not shippable weights)."""
    import subprocess

    weights, runs = args.out / "weights", args.out / "train-runs"
    cmd = [sys.executable, "-m", "pipeline.cli", "train", "all", "--quick", "--no-progress", "--device",
           "cuda" if args.device.startswith("cuda") else "cpu", "--threads", str(args.threads),
           "--out", str(weights), "--run-dir", str(runs)]  # fmt: skip
    print(f"[gpu bench] training burst: {' '.join(cmd[1:])}", flush=True)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    (args.out / "train.log").write_text(proc.stdout + proc.stderr)
    files = (
        sorted(str(f.relative_to(weights)) for f in weights.rglob("*") if f.is_file())
        if weights.is_dir()
        else []
    )
    return {"command": " ".join(cmd[1:]), "returncode": proc.returncode, "seconds": time.perf_counter() - t,
            "weights": str(weights), "files": files}  # fmt: skip


# ---- report ----------------------------------------------------------------------------------------------
SIZES = {
    "gpu": {"presets": {"paper": "paper-h4-l2", "small": "small"}, "batches": [1, 64], "train_batch": 32,
            "repeats": 15, "train_repeats": 10, "rollout_k": 8, "mac_windows": 256, "matmul_n": 8192, "frames": 32, "clips": 16,
            "pipeline_repeats": 3, "render_batch": 32},
    "dry_run": {"presets": {"paper": "tiny"}, "batches": [1, 4], "train_batch": 4,
                "repeats": 2, "train_repeats": 2, "rollout_k": 2, "mac_windows": 8, "matmul_n": 64, "frames": 4, "clips": 2,
                "pipeline_repeats": 1, "render_batch": 4},
}  # fmt: skip


def checks(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target against what was measured (None where the part was skipped)."""
    paper = r.get("predictor", {}).get("paper", {})
    pipe = next((v for k, v in r.get("pipeline", {}).items() if k.endswith("_clips")), {})
    values = {
        "state_b1_ratio": paper.get("state_ratio", {}).get("b1"),
        "state_b64_ratio": paper.get("state_ratio", {}).get("b64"),
        "train_ratio": paper.get("train_ratio"),
        "mfu_bf16": r.get("mfu", {}).get("bf16", {}).get("mfu"),
        "pipeline_frames_per_s_b16": pipe.get("predicted_frames_per_s"),
    }
    return {k: {"value": v, "target": TARGETS[k], "met": None if v is None else bool(v >= TARGETS[k])}
            for k, v in values.items()}  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# bench/gpu.sh on {r['machine']['device_name']}" + (" (DRY RUN: tiny sizes on CPU)" if r["dry_run"] else ""),
             "", f"`{r['command']}`, {r['started']}, torch {r['machine']['torch']}", ""]  # fmt: skip
    for p in r.get("predictor", {}).values():
        lines += [f"## Predictor, preset {p['preset']} ({p['params']['four_tensor'] / 1e6:.2f}M 4-tensor, "
                  f"{p['params']['baseline'] / 1e6:.2f}M baseline)", "",
                  "| measurement | 4-tensor | baseline | ratio |", "|---|---:|---:|---:|",
                  f"| training windows/s | {p['train_windows_per_s']['four_tensor']:.1f} | "
                  f"{p['train_windows_per_s']['baseline']:.1f} | {p['train_ratio']:.1f}x |"]  # fmt: skip
        for b, s in p["state_s"].items():
            lines.append(f"| time per predicted state, batch {b[1:]} (baseline N tokens) | "
                         f"{s['four_tensor'] * 1e3:.3f} ms | {s['baseline'] * 1e3:.3f} ms | {p['state_ratio'][b]:.1f}x |")  # fmt: skip
        ro = p["rollout"]
        lines += ["", f"Rollout of {ro['k']} states (Predictor.predict_ids), time per predicted state:", "",
                  "| batch | eager | compiled | compiled fell back | peak memory (eager / compiled) |",
                  "|---|---:|---:|---|---:|"]  # fmt: skip
        for b in sorted({key.split("_b")[1] for key in ro if "_b" in key}, key=int):
            e, c = ro[f"eager_b{b}"], ro.get(f"compiled_b{b}")
            mem = " / ".join("n/a" if x is None or x["peak_memory_bytes"] is None
                           else f"{x['peak_memory_bytes'] / 2**20:.0f} MiB" for x in (e, c))  # fmt: skip
            comp = "not run (dry run)" if c is None else f"{c['state_s'] * 1e3:.3f} ms"
            lines.append(f"| {b} | {e['state_s'] * 1e3:.3f} ms | {comp} | "
                         f"{None if c is None else c['fell_back_to_eager']} | {mem} |")  # fmt: skip
        lines.append("")
    if "mfu" in r:
        m = r["mfu"]
        lines += [f"## Model FLOP utilisation, 4-tensor training step ({m['preset']}, batch {m['train_batch']})", "",
                  "| dtype | matmul peak | step | achieved | MFU |", "|---|---:|---:|---:|---:|"]  # fmt: skip
        for name in ("bf16", "fp32"):
            lines.append(f"| {name} | {m['matmul_peak_flops'][name] / 1e12:.2f} TFLOP/s | {m[name]['step_s'] * 1e3:.2f} ms"
                         f" | {m[name]['achieved_flops'] / 1e12:.2f} TFLOP/s | {m[name]['mfu']:.1%} |")  # fmt: skip
        lines.append("")
    if "pipeline" in r:
        p = r["pipeline"]
        lines += [
            f"## Pipeline ({p['clip']}, {p['weights']})",
            "",
            "| stage | batch 1 (median) |",
            "|---|---:|",
        ]
        lines += [f"| {s} | {v * 1e3:.1f} ms |" for s, v in p["batch_1"]["median_s"].items()]
        big = next(v for k, v in p.items() if k.endswith("_clips"))
        lines += ["", f"Predicted frames/s: batch 1 {p['batch_1']['predicted_frames_per_s']:.1f}, "
                  f"a batch of {r['sizes']['clips']} clips {big['predicted_frames_per_s']:.1f} (stages: "
                  + ", ".join(f"{s} {v:.2f} s" for s, v in big["stage_s"].items()) + ")", ""]  # fmt: skip
    if "train" in r:
        t = r["train"]
        lines += ["## Training burst", "", f"`{t['command']}`: exit {t['returncode']} in {t['seconds']:.0f} s, "
                  f"{len(t['files'])} files in {t['weights']} (log: train.log)", ""]  # fmt: skip
    lines += ["## Targets", "", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for k, c in r["targets"].items():
        v = "skipped" if c["value"] is None else f"{c['value']:.3g}"
        lines.append(f"| {k} | {v} | {c['target']:g} | {c['met']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here (the peak and the step alike)
    sizes = SIZES["dry_run" if args.dry_run else "gpu"]
    args.out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    r: dict[str, Any] = {
        "command": "bench/gpu.sh " + " ".join(sys.argv[1:] if argv is None else argv),
        "dry_run": args.dry_run,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": {"device": args.device, "device_name": name, "torch": torch.__version__,
                    "cuda": torch.version.cuda, "platform": platform.platform(), "threads": args.threads},
        "sizes": sizes,
    }  # fmt: skip
    t0 = time.perf_counter()
    sections = (("predictor", predictor_section), ("mfu", mfu_section), ("pipeline", pipeline_section))
    for key, fn in sections:
        if key in args.skip:
            continue
        t = time.perf_counter()
        r[key] = fn(args, sizes)
        print(f"[gpu bench] {key} done in {time.perf_counter() - t:.1f} s", flush=True)
    if args.train:
        r["train"] = train_burst(args)
    r["seconds"] = time.perf_counter() - t0
    r["targets"] = checks(r)
    (args.out / "gpu.json").write_text(json.dumps(r, indent=2) + "\n")
    (args.out / "gpu.md").write_text(markdown(r))
    print("\n== summary ==")
    print(f"{name}{' (dry run)' if args.dry_run else ''}: {r['seconds']:.0f} s")
    for k, c in r["targets"].items():
        v = "skipped" if c["value"] is None else f"{c['value']:.3g}"
        print(f"  {k:28s} {v:>10s}  (target >= {c['target']:g}; met: {c['met']})")
    if args.train:
        print(f"  training burst: exit {r['train']['returncode']} in {r['train']['seconds']:.0f} s -> "
              f"{r['train']['weights']}")  # fmt: skip
    print(f"wrote {args.out / 'gpu.json'} and {args.out / 'gpu.md'}")
    return 1 if args.train and r["train"]["returncode"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
