"""Training of the pixel-space baseline (models.pixel, `semworld train pixel`): the SimVP-style predictor learns to
continue clips frame by frame, with its loss taken on short autoregressive rollouts: world clips (the ones the
shipped state predictor learned from), or a game's recorded clips under their actions (a recording domain, the
clips `semworld world generate --domain NAME` writes, decoded from their MP4s). A plain loop: fresh batches every
step, atomic checkpoints, resume after a kill.

Shapes: B windows, T context frames, K rollout steps, C = 3, S the network's side (config.image_size).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.pixel import PixelConfig, PixelModel, resize_frames
from pipeline.domain import Domain, get_domain
from pipeline.training.image_args import TrainPixelArgs
from pipeline.training.recorded_frames import RecordedFrames, record_frames
from pipeline.training.renderer_parts import reconstruction_loss, static_background
from pipeline.training.schedule import warmup_cosine
from pipeline.utils import UserError, atomic_dir, atomic_torch_save, atomic_write_json

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
LOG = "log.jsonl"
CURVE = "loss_curve.png"
SUMMARY = "training_summary.json"
MODEL_FOLDER = "model"
EVAL_HORIZON = 8  # frames each evaluation rollout predicts (the comparison's horizon)
WORLD_SIZE = 128  # the world draws its frames at this side; the network resizes them to config.image_size


# ---- data ----------------------------------------------------------------------------------------------
def clip_states(seed: int, clips: int, length: int, split: str) -> list[list[str]]:
    """The states of world.sequences("all", clips, seed, length, split): one list per clip."""
    import world

    return [rec["states"] for rec in world.sequences("all", clips, seed, length=length, split=split)]


def frames_tensor(states: Sequence[str], size: int) -> torch.Tensor:
    """World frames of `states`, drawn at 128 px and resized to `size`: (N, C, size, size) float in [0, 1]."""
    import world

    arr = np.stack([world.render_state(s, size=WORLD_SIZE) for s in states])  # (N, 128, 128, 3) uint8
    x = torch.from_numpy(arr).permute(0, 3, 1, 2).float().div(255.0)  # (N, C, 128, 128)
    return resize_frames(x, size)


def sample_batch(
    clips: Sequence[Sequence[str]], n: int, window: int, size: int, generator: torch.Generator
) -> torch.Tensor:
    """`n` windows of `window` consecutive frames from random clips and starts: (B, window, C, S, S)."""
    which = torch.randint(len(clips), (n,), generator=generator).tolist()
    states: list[str] = []
    for c in which:
        start = int(torch.randint(len(clips[c]) - window + 1, (1,), generator=generator))
        states += clips[c][start : start + window]
    return frames_tensor(states, size).reshape(n, window, 3, size, size)


class RecordedClips:
    """A recording domain's clips for the pixel model: every frame resized to the network's side once,
    (F, S, S, 3) uint8, the clips' frame ranges, and the id of the action taken after each frame."""

    def __init__(self, recorded: RecordedFrames, size: int, actions: Sequence[str]) -> None:
        x = torch.from_numpy(recorded.frames).permute(0, 3, 1, 2)  # (F, C, H, W) uint8
        chunks = [resize_frames(x[i : i + 256].float().div(255.0), size) for i in range(0, len(x), 256)]
        self.frames = torch.cat(chunks).mul(255.0).round().to(torch.uint8)  # (F, C, S, S)
        self.clips = recorded.clips()
        index = {word: i for i, word in enumerate(actions)}
        self.action_ids = torch.tensor([index.get(a or "", 0) for a in recorded.actions])  # (F,) unknown -> 0
        sample = self.frames[:: max(1, len(self.frames) // 512)].float().div(127.5).sub(1.0)  # in [-1, 1]
        self.background = static_background(sample)  # what never moves: the walls (reconstruction_loss)

    def windows(self, starts: Sequence[int], window: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames (B, window, C, S, S) in [0, 1] from each start, and the k actions (B, K) taken after the frames
        that end each context (window - k frames): the actions the rollout steps forecast under."""
        context = window - k
        frames = torch.stack([self.frames[s : s + window] for s in starts]).float().div(255.0)
        acts = torch.stack([self.action_ids[s + context - 1 : s + context - 1 + k] for s in starts])
        return frames, acts

    def long_clips(self, window: int) -> list[range]:
        """The clips that hold `window` frames (an episode that ends early records a shorter clip)."""
        long = [clip for clip in self.clips if len(clip) >= window]
        if not long:
            raise UserError(f"no recorded clip holds {window} frames: record longer clips (--length)")
        return long

    def batch(
        self, n: int, window: int, k: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`n` windows of `window` consecutive frames from random clips and starts, and their rollout actions."""
        starts = []
        long = self.long_clips(window)
        for c in torch.randint(len(long), (n,), generator=generator).tolist():
            clip = long[c]
            starts.append(clip.start + int(torch.randint(len(clip) - window + 1, (1,), generator=generator)))
        return self.windows(starts, window, k)


def rollout_loss(
    pred: torch.Tensor, target: torch.Tensor, object_weight: float, background: str | torch.Tensor = "corner"
) -> torch.Tensor:
    """Object-weighted L1 + MSE of predicted frames (B, K, C, S, S) in [0, 1] against the true ones."""
    flat_pred = pred.flatten(0, 1) * 2 - 1  # (B*K, C, S, S) in [-1, 1], as reconstruction_loss expects
    flat_true = target.flatten(0, 1) * 2 - 1
    return reconstruction_loss(flat_pred, flat_true, object_weight, background=background)


def learning_rate(args: TrainPixelArgs, step: int) -> float:
    """Linear warmup for warmup_steps, then cosine decay to lr * min_lr_ratio at `steps` (flat after)."""
    return warmup_cosine(args.lr, step, args.steps, args.warmup_steps, args.min_lr_ratio)


# ---- evaluation ----------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(
    model: PixelModel, held_out: torch.Tensor, actions: torch.Tensor | None = None
) -> dict[str, Any]:
    """Per-pixel MSE (frames in [0, 1], at the network's side) and PSNR of 8-frame rollouts from the first T
    frames of each held-out clip (B, T + 8, C, S, S) (under its actions (B, 8), for a model with action words),
    by horizon and overall."""
    model.eval()
    t = model.config.context
    pred = model.rollout(held_out[:, :t], held_out.shape[1] - t, actions)  # (B, K, C, S, S)
    model.train()
    mse_h = ((pred - held_out[:, t:]) ** 2).mean(dim=(0, 2, 3, 4))  # (K,)
    psnr_h = [10 * math.log10(1 / max(float(m), 1e-10)) for m in mse_h]
    return {
        "mse": round(float(mse_h.mean()), 6),
        "mse_by_horizon": [round(float(m), 6) for m in mse_h],
        "psnr_by_horizon": [round(p, 3) for p in psnr_h],
    }


def plot_losses(history: Sequence[dict[str, Any]], path: Path) -> None:
    """Training loss (logged every 50 steps) and the held-out rollout MSE (every evaluation) against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in history if "loss" in r]
    evals = [r for r in history if "eval" in r]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    if train:
        ax.plot(
            [r["step"] for r in train], [r["loss"] for r in train], lw=1, label="train loss (weighted L1+MSE)"
        )
    if evals:
        ax.plot([r["step"] for r in evals], [r["eval"]["mse"] for r in evals], marker="o", ms=3,
                label=f"val rollout MSE per pixel (h=1..{EVAL_HORIZON})")  # fmt: skip
        ax.plot([r["step"] for r in evals], [r["eval"]["mse_by_horizon"][0] for r in evals], marker=".", ms=3,
                label="val MSE per pixel, h=1")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_title("pixel baseline (SimVP-style): training")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- the run -------------------------------------------------------------------------------------------
@dataclass
class PixelRun:
    """What the loop carries: the model, its optimizer, where it stands and what it logged."""

    args: TrainPixelArgs
    out: Path
    model: PixelModel
    optimizer: torch.optim.Optimizer
    step: int = 0
    elapsed: float = 0.0  # wall seconds of earlier sessions
    cpu: float = 0.0  # process CPU seconds of earlier sessions
    history: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    cpu_started: float = field(default_factory=time.process_time)

    def wall_seconds(self) -> float:
        return self.elapsed + time.time() - self.started

    def cpu_seconds(self) -> float:
        return self.cpu + time.process_time() - self.cpu_started

    def checkpoint(self) -> None:
        atomic_torch_save(
            {
                "args": self.args.to_dict(),
                "step": self.step,
                "elapsed": self.wall_seconds(),
                "cpu": self.cpu_seconds(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "history": self.history,
            },
            self.out / CHECKPOINT,
        )

    def log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        with open(self.out / LOG, "a") as fh:
            fh.write(json.dumps(record) + "\n")


def setup_run(args: TrainPixelArgs) -> PixelRun:
    """A seeded fresh model and optimizer, restored from out/checkpoint.pt when there is one (the model's shape
    must match; the step budget and the wall-clock cap may change)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    model = PixelModel(args.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    run = PixelRun(args, out, model, optimizer)
    path = out / CHECKPOINT
    if path.exists():
        ckpt = torch.load(path, weights_only=False)
        if ckpt["args"]["model"] != args.model.to_dict():
            raise ValueError(
                f"{path}: the checkpoint's model {ckpt['args']['model']} differs from --model flags"
            )
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        run.step, run.elapsed, run.cpu, run.history = (
            ckpt["step"],
            ckpt["elapsed"],
            ckpt["cpu"],
            ckpt["history"],
        )
        # The log file may hold records written after the checkpoint; rewrite it from the checkpoint's history.
        (out / LOG).write_text("".join(json.dumps(r) + "\n" for r in run.history))
        logger.info("resumed %s at step %d (%.1f CPU-minutes so far)", path, run.step, run.cpu / 60)
    return run


def save_weights(run: PixelRun, metrics: dict[str, Any] | None) -> None:
    """out/model (config.json + model.safetensors + metrics.json), swapped in atomically."""
    with atomic_dir(run.out / MODEL_FOLDER) as tmp:
        run.model.save_pretrained(tmp)
        if metrics is not None:
            (tmp / "metrics.json").write_text(json.dumps({"step": run.step, **metrics}, indent=2) + "\n")


def pixel_config(args: TrainPixelArgs, domain: Domain) -> PixelConfig:
    """The network's shape: the model flags, with the domain's action words (a domain with actions; flags that
    name other words are refused)."""
    actions = tuple(getattr(domain, "actions", ()) or ())
    if args.model.actions and args.model.actions != actions:
        raise ValueError(
            f"--actions {' '.join(args.model.actions)}: domain {domain.name!r} has {actions or 'none'}"
        )
    return dataclasses.replace(args.model, actions=actions)


def pixel_data(
    args: TrainPixelArgs, domain: Domain, cfg: PixelConfig
) -> tuple[Any, torch.Tensor, torch.Tensor | None]:
    """(training clips, held-out windows (B, T + 8, C, S, S), their actions (B, 8) or None). The built-in world:
    world clips of states, drawn when a batch asks. A recording domain: `clips` train-split clips of `length`
    states recorded once into out/data-train, and the first T + 8 frames of `eval_clips` val-split clips."""
    held = cfg.context + EVAL_HORIZON
    if domain.name == "shapes":
        val = [c[:held] for c in clip_states(args.seed, args.eval_clips, args.length, "val")]
        return (
            clip_states(args.seed, args.clips, args.length, "train"),
            torch.stack([frames_tensor(c, cfg.image_size) for c in val]),
            None,
        )

    def recorded(split: str, clips: int) -> RecordedClips:
        data = record_frames(domain, Path(args.out) / f"data-{split}", clips=clips, length=args.length,
                             seed=args.seed, split=split, progress=args.progress)  # fmt: skip
        return RecordedClips(data, cfg.image_size, cfg.actions)

    val_clips = recorded("val", args.eval_clips)
    frames, actions = val_clips.windows([c.start for c in val_clips.long_clips(held)], held, EVAL_HORIZON)
    return recorded("train", args.clips), frames, actions


def train_pixel(args: TrainPixelArgs) -> dict[str, Any]:
    """Run (or resume) the training; returns the summary written to out/training_summary.json."""
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    domain = get_domain(args.domain)
    cfg = pixel_config(args, domain)
    args = dataclasses.replace(args, model=cfg)
    run = setup_run(args)
    window = cfg.context + args.rollout_steps
    clips, held_out, held_actions = pixel_data(args, domain, cfg)
    background = getattr(clips, "background", "corner")
    params = sum(p.numel() for p in run.model.parameters())
    logger.info(
        "pixel model: %.3fM parameters, %d training clips",
        params / 1e6,
        len(clips if isinstance(clips, list) else clips.clips),
    )
    session_start = time.time()
    bar = tqdm(total=args.steps, initial=run.step, desc="pixel", unit="step", disable=not args.progress)
    stopped_by = "steps"
    run.model.train()
    while run.step < args.steps:
        if args.minutes > 0 and time.time() - session_start > 60 * args.minutes:
            stopped_by = "minutes"
            break
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + run.step)
        if isinstance(clips, RecordedClips):
            batch, actions = clips.batch(
                args.batch_size, window, args.rollout_steps, gen
            )  # (B, T + K, C, S, S)
        else:
            batch, actions = sample_batch(clips, args.batch_size, window, cfg.image_size, gen), None
        pred = run.model.rollout(batch[:, : cfg.context], args.rollout_steps, actions)  # (B, K, C, S, S)
        loss = rollout_loss(pred, batch[:, cfg.context :], args.object_weight, background)
        for group in run.optimizer.param_groups:
            group["lr"] = learning_rate(args, run.step)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), args.grad_clip)
        run.optimizer.step()
        run.step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.4f}")
        if run.step % 50 == 0:
            run.log({"step": run.step, "loss": round(loss.item(), 6), "lr": learning_rate(args, run.step - 1),
                     "seconds": round(run.wall_seconds(), 1), "cpu_seconds": round(run.cpu_seconds(), 1)})  # fmt: skip
        if run.step % args.eval_every == 0 or run.step == args.steps:
            scores = evaluate(run.model, held_out, held_actions)
            run.log({"step": run.step, "eval": scores})
            save_weights(run, scores)
            plot_losses(run.history, run.out / CURVE)
        if run.step % args.checkpoint_every == 0:
            run.checkpoint()
    bar.close()
    latest = run.history[-1] if run.history else {}
    if "eval" in latest and latest["step"] == run.step:
        last_eval = latest["eval"]
    else:  # stopped between evaluations (or resumed a finished run): evaluate what there is now
        last_eval = evaluate(run.model, held_out, held_actions)
        run.log({"step": run.step, "eval": last_eval})
        save_weights(run, last_eval)
    run.checkpoint()
    plot_losses(run.history, run.out / CURVE)
    summary = {
        "model": "pixel_simvp",
        "domain": domain.name,
        "parameters": params,
        "config": cfg.to_dict(),
        "args": args.to_dict(),
        "steps_done": run.step,
        "stopped_by": stopped_by,
        "frames_seen": run.step * args.batch_size * window,
        "seconds_total": round(run.wall_seconds(), 1),
        "cpu_seconds_total": round(run.cpu_seconds(), 1),
        "eval": last_eval,
        "weights": str(run.out / MODEL_FOLDER),
    }
    atomic_write_json(run.out / SUMMARY, summary)
    logger.info("pixel: %d steps, %.1f CPU-minutes, val rollout MSE %.5f -> %s", run.step,
                run.cpu_seconds() / 60, last_eval["mse"], run.out / MODEL_FOLDER)  # fmt: skip
    return summary
