"""Training of the predictors (either kind): a plain, seeded loop with the section 8.2 stopping rule.

A run reads as setup -> fit -> save: `setup_run` (processes, data and model: pipeline.training.setup, .warmstart),
`fit_epoch` per epoch (its steps: pipeline.training.steps), then `save_epoch` / `finish_run` (the weights of the
best epoch, checkpoint-and-resume, the JSON-lines log and the L_S(T) plot). Each epoch is scored by
`pipeline.evaluation.predictor.evaluate`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler

from models.baseline import BaselineConfig, BaselineModel
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config
from pipeline.data import (
    SUMMARY_FILE,
    clip_windows,
    uniform_cross_entropy,
)
from pipeline.evaluation.predictor import evaluate, evaluate_clips
from pipeline.tokenizer import StateTokenizer
from pipeline.training.args import BOTH, MODEL_KINDS, TrainArgs
from pipeline.training.setup import (
    DistContext,
    PreparedData,
    epoch_seed,
    init_distributed,
    prepare_data,
    rng_state,
    set_determinism,
    set_rng_state,
)
from pipeline.training.steps import (
    SegmentModule,
    StepModule,
    parameter_groups,
    rollout_clip_windows,
    rollout_windows,
    set_learning_rate,
    train_clip_batch,
)
from pipeline.training.warmstart import init_tokenizer, init_weights
from pipeline.utils import UserError, atomic_torch_save, atomic_write_json, atomic_write_text

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "last.pt"
LOG_FILE = "train_log.jsonl"
CURVE_FILE = "loss_curve.png"
BOTH_CURVE_FILE = "loss_curves.png"
LABELS = {"four_tensor": "4-tensor", "baseline": "1-D baseline", "attentime_lm": "1-D Attentime"}


# ---- the stopping rule (section 8.2) ------------------------------------------------------------------
@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str  # "rule", "budget" or "" (keep going)
    best_epoch: int  # zero-based index of the first minimum of the validation selection loss


def stop_decision(
    val_losses: list[float], epoch_budget: int, patience: int = 5, tolerance: float = 1.01
) -> StopDecision:
    """Decide after the last epoch of `val_losses` (one per finished epoch) whether training ends.

    Stop when at least `patience` epochs have passed since the minimum and the latest loss is above
    `tolerance` times that minimum, or when `epoch_budget` epochs are done. The selected checkpoint is the epoch
    of the minimum (the first one, on ties).
    """
    if not val_losses:
        raise ValueError("stop_decision needs at least one finished epoch")
    best = min(range(len(val_losses)), key=lambda i: (val_losses[i], i))
    last = len(val_losses) - 1
    if last - best >= patience and val_losses[last] > tolerance * val_losses[best]:
        return StopDecision(True, "rule", best)
    if len(val_losses) >= epoch_budget:
        return StopDecision(True, "budget", best)
    return StopDecision(False, "", best)


# ---- models --------------------------------------------------------------------------------------------
def build_model(
    kind: str,
    preset: str,
    tokenizer: StateTokenizer,
    dropout: float = 0.1,
    causal_slices: bool = False,
    attention: str = "four_tensor",
    memory: Any = None,
) -> Any:
    """A fresh predictor of `kind` shaped by `preset`, with vocab_size and end_ids from the tokenizer."""
    cfg = four_tensor_config(
        preset,
        vocab_size=tokenizer.vocab_size,
        end_ids=tokenizer.end_ids,
        dropout=dropout,
        slice_causal=causal_slices,
        attention=attention,
        **({"memory": memory} if memory is not None else {}),
    )
    if kind == "four_tensor":
        return FourTensorModel(cfg)
    if kind == "baseline":
        return BaselineModel(BaselineConfig.from_predictor(cfg))
    if kind == "attentime_lm":
        from models.attentime import AttentimeLM, AttentimeLMConfig

        return AttentimeLM(AttentimeLMConfig.from_predictor(cfg))  # type: ignore[arg-type]
    raise ValueError(f"model kind must be one of {MODEL_KINDS}, got {kind!r}")


# ---- files ---------------------------------------------------------------------------------------------
def _save_weights_atomically(model: Any, out: Path) -> None:
    """save_pretrained into a scratch folder, then move each file over the old one."""
    scratch = out / ".saving"
    shutil.rmtree(scratch, ignore_errors=True)
    model.save_pretrained(scratch)
    for f in scratch.iterdir():
        f.replace(out / f.name)
    scratch.rmdir()


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(rec) + "\n" for rec in history))


def plot_curves(
    curves: dict[str, list[dict[str, Any]]],
    path: str | Path,
    uniform_ce: float | None = None,
    best: dict[str, int] | None = None,
    title: str = "",
) -> Path:
    """L_S(T) per epoch, one line per model (the paper's figure 2); the selected epoch of each is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for label, history in curves.items():
        epochs = [rec["epoch"] for rec in history]
        values = [rec["val_last_ce"] for rec in history]
        (line,) = ax.plot(epochs, values, marker="o", ms=3, label=label)
        if best and label in best and history:
            rec = history[best[label]]
            ax.plot([rec["epoch"]], [rec["val_last_ce"]], marker="*", ms=12, color=line.get_color())
    if uniform_ce is not None:
        ax.axhline(uniform_ce, ls="--", lw=1, color="grey", label=f"uniform ln|V| = {uniform_ce:.2f}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation L_S(T) (nats per token)")
    ax.set_title(title or "Last-sentence cross-entropy per epoch")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- one run -------------------------------------------------------------------------------------------
@dataclass
class TrainResult:
    kind: str
    out: Path
    history: list[dict[str, Any]]
    best_epoch: int  # zero-based index into history
    stopped_by: str
    summary: dict[str, Any]
    model: Any = field(repr=False, default=None)  # this process's replica after the last epoch run

    @property
    def best(self) -> dict[str, Any]:
        return self.history[self.best_epoch]


EpochHook = Callable[[str, int], None]  # (model kind, finished epoch number 1..E), e.g. to simulate a kill


@dataclass
class PredictorRun:
    """One model's training run: what setup makes and the epoch loop and the save step share."""

    kind: str
    args: TrainArgs
    data: PreparedData
    out: Path
    ctx: DistContext
    model: Any
    optimizer: torch.optim.Optimizer
    step_module: nn.Module  # forward = the model's training step (DDP-wrapped under torchrun)
    sampler: DistributedSampler[int]
    fingerprint: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    train_clips: list[torch.Tensor] = field(default_factory=list)  # memory runs: each clip's windows in order
    val_clips: list[torch.Tensor] = field(default_factory=list)

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def ckpt_path(self) -> Path:
        return self.out / CHECKPOINT_DIR / CHECKPOINT_FILE

    def decide(self) -> StopDecision:
        """The section 8.2 rule on the validation selection losses so far."""
        if not self.history:
            return StopDecision(False, "", 0)
        losses = [h["val_selection_loss"] for h in self.history]
        return stop_decision(losses, self.args.epochs, self.args.patience, self.args.tolerance)


def _train_one(
    kind: str,
    args: TrainArgs,
    data: PreparedData,
    out: Path,
    ctx: DistContext,
    on_epoch_end: EpochHook | None = None,
) -> TrainResult:
    """Set up (or resume) one model, fit it epoch by epoch until the stopping rule says so, then summarise."""
    run = setup_run(kind, args, data, out, ctx)
    decision = run.decide()
    while not decision.stop:
        epoch = len(run.history)
        run.history.append(fit_epoch(run, epoch))
        decision = run.decide()
        log_epoch(run, run.history[-1])
        if ctx.is_main:
            save_epoch(run, decision)
        if ctx.distributed:
            dist.barrier()
        if on_epoch_end is not None:
            on_epoch_end(kind, epoch + 1)
    return finish_run(run, decision)


def setup_run(kind: str, args: TrainArgs, data: PreparedData, out: Path, ctx: DistContext) -> PredictorRun:
    """The seeded model and optimizer (restored from out/checkpoint/last.pt when it holds this run), DDP under
    torchrun, the sharded sampler, and on rank 0 the tokenizer and the log as of the checkpoint."""
    fingerprint = {**args.fingerprint(), "model": kind, "world_size": ctx.world_size}
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model: Any = build_model(
        kind,
        args.preset,
        data.tokenizer,
        args.dropout,
        args.causal_slices and kind == "four_tensor",
        args.attention if kind == "four_tensor" else "four_tensor",
        args.memory,
    ).to(ctx.device)
    if args.init_from is not None:
        init_weights(model, args.init_from, args.grow_layer)
    optimizer = torch.optim.AdamW(parameter_groups(model, args), lr=args.lr, weight_decay=args.weight_decay)
    history: list[dict[str, Any]] = []
    ckpt_path = out / CHECKPOINT_DIR / CHECKPOINT_FILE
    if ckpt_path.is_file():
        ckpt = torch.load(ckpt_path, map_location=ctx.device, weights_only=False)
        if ckpt["fingerprint"] != fingerprint:
            diff = sorted(k for k in fingerprint if ckpt["fingerprint"].get(k) != fingerprint[k])
            raise UserError(
                f"{out} holds a checkpoint of a different run (differs in {', '.join(diff)}); "
                f"use another --out or delete {ckpt_path.parent}"
            )
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"])
        history = ckpt["history"]
        logger.info("%s: resuming %s after epoch %d", LABELS[kind], out, len(history))

    # what the schedule scales (saved in, and restored from, checkpoints)
    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    step_module: nn.Module = (
        SegmentModule(model, last_only=args.target_slices == "last", recall_weight=args.memory_recall_weight)
        if args.memory
        else StepModule(model, last_only=args.target_slices == "last")
    )
    if ctx.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        step_module = DDP(step_module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    train_clips = clip_windows(data.train) if args.memory else []
    # The sampler only needs len(); it yields window (memory: clip) indices, the same shards as torchrun's loaders.
    indices: Any = range(len(train_clips) if args.memory else len(data.train.ids))
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed
    )
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt_path.parent.mkdir(exist_ok=True)
        data.tokenizer.save(out)
        _write_log(out / LOG_FILE, history)  # drops lines of an epoch that ran after the last checkpoint
    run = PredictorRun(
        kind, args, data, out, ctx, model, optimizer, step_module, sampler, fingerprint, history
    )
    if args.memory:
        run.train_clips, run.val_clips = train_clips, clip_windows(data.val)
    return run


def fit_epoch(run: PredictorRun, epoch: int) -> dict[str, Any]:
    """Train one epoch (zero-based `epoch`) on this rank's shard, then validate on rank 0; the epoch's record."""
    from tqdm.auto import tqdm

    args, ctx, model = run.args, run.ctx, run.model
    t0 = time.perf_counter()
    torch.manual_seed(epoch_seed(args.seed, epoch, ctx.rank))
    run.sampler.set_epoch(epoch)  # shuffles with seed + epoch; each rank takes its own shard
    order = torch.tensor(list(run.sampler), dtype=torch.long)
    model.train()
    loss_sum, n_seen = 0.0, 0
    per_batch = args.clips_per_batch if args.memory else args.batch_size
    bar = tqdm(
        range(0, len(order), per_batch),
        desc=f"{run.label} epoch {epoch + 1}/{args.epochs}",
        leave=False,
        disable=not (args.progress and ctx.is_main),
        unit="batch",
    )
    steps_per_epoch = -(-len(order) // per_batch)
    rollout = (
        None
        if not (args.memory and args.rollout_steps)
        else (lambda w, lens: rollout_clip_windows(model, w, lens, args.rollout_steps, args.rollout_prob))
    )
    for step, i in enumerate(bar):
        set_learning_rate(run.optimizer, args, epoch * steps_per_epoch + step, args.epochs * steps_per_epoch)
        if args.memory:
            group = [run.train_clips[int(k)] for k in order[i : i + per_batch]]
            seg_loss, seg_windows = train_clip_batch(
                run.step_module,
                run.optimizer,
                group,
                args.bptt_windows,
                ctx.device,
                rollout,
                args.memory_recall_target,
            )
            loss_sum += seg_loss
            n_seen += seg_windows
            bar.set_postfix(loss=f"{loss_sum / max(n_seen, 1):.3f}")
            continue
        batch = run.data.train.ids[order[i : i + args.batch_size]].to(ctx.device)  # (B, T+1(+K), N)
        if args.rollout_steps:
            batch = rollout_windows(model, batch, args.rollout_steps, args.rollout_prob)  # (B, T+1, N)
        loss = run.step_module(batch)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        loss_sum += float(loss.detach()) * batch.shape[0]
        n_seen += batch.shape[0]
        bar.set_postfix(loss=f"{loss_sum / max(n_seen, 1):.3f}")
    train_loss = loss_sum / max(n_seen, 1)
    if ctx.distributed:
        t = torch.tensor([loss_sum, float(n_seen)], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(t)
        train_loss = float(t[0] / t[1])

    # Validation on rank 0 only; the others receive its numbers, so every rank takes the same decision.
    def validate() -> dict[str, float]:
        if args.memory:
            return evaluate_clips(model, run.val_clips, max(args.batch_size, 64), ctx.device)
        return evaluate(model, run.data.val.ids, max(args.batch_size, 64), ctx.device)

    metrics = [validate() if ctx.is_main else None]
    if ctx.distributed:
        dist.broadcast_object_list(metrics, src=0)
    m = metrics[0]
    assert m is not None
    selection = m["last_ce"] if args.target_slices == "last" else m["selection_loss"]
    return {
        "epoch": epoch + 1,
        "train_loss": round(train_loss, 6),
        "val_selection_loss": round(selection, 6),  # what the 8.2 rule and the choice of epoch read
        "val_last_ce": round(m["last_ce"], 6),
        "val_token_acc": round(m["token_acc"], 6),
        "val_exact_acc": round(m["exact_acc"], 6),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def log_epoch(run: PredictorRun, record: dict[str, Any]) -> None:
    logger.info(
        "%s epoch %d: train %.4f  val selection %.4f  L_S(T) %.4f  token acc %.3f  exact %.3f  (%.1fs)",
        run.label,
        record["epoch"],
        record["train_loss"],
        record["val_selection_loss"],
        record["val_last_ce"],
        record["val_token_acc"],
        record["val_exact_acc"],
        record["seconds"],
    )


def save_epoch(run: PredictorRun, decision: StopDecision) -> None:
    """Rank 0, after each epoch. Order matters for a kill at any point: the weights when this epoch is the
    minimum so far (the 8.2 checkpoint), then the log and the curve, then the checkpoint; a run resumed from the
    previous checkpoint recomputes this epoch to the same numbers."""
    if decision.best_epoch == len(run.history) - 1:
        _save_weights_atomically(run.model, run.out)
    _write_log(run.out / LOG_FILE, run.history)
    uniform = uniform_cross_entropy(run.data.tokenizer.vocab_size)
    plot_curves({run.label: run.history}, run.out / CURVE_FILE, uniform, {run.label: decision.best_epoch})
    atomic_torch_save(
        {
            "fingerprint": run.fingerprint,
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "rng": rng_state(),
            "history": run.history,
        },
        run.ckpt_path,
    )


def finish_run(run: PredictorRun, decision: StopDecision) -> TrainResult:
    """The run's summary (written to training_summary.json on rank 0) and result."""
    args, ctx, history = run.args, run.ctx, run.history
    best = history[decision.best_epoch]
    uniform = uniform_cross_entropy(run.data.tokenizer.vocab_size)
    summary = {
        "model": run.kind,
        "preset": args.preset,
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "config": run.model.config.to_dict(),
        "args": asdict(args),
        "data": run.data.stats,
        "vocab_size": run.data.tokenizer.vocab_size,
        "uniform_ce": uniform,
        "best_epoch": best["epoch"],
        "epochs_run": len(history),
        "stopped_by": decision.reason,
        "best": best,
        "seconds_total": round(sum(h["seconds"] for h in history), 3),
        "seconds_this_session": round(time.perf_counter() - run.started, 3),
        "world_size": ctx.world_size,
        "device": str(ctx.device),
        "split": {
            "seed": args.seed,
            "val_fraction": args.val_fraction,
            "max_windows": args.max_windows,
            "data_format": args.data_format,
        },
    }
    if ctx.is_main:
        atomic_write_json(run.out / SUMMARY_FILE, summary)
        chance = 1 / max(1, run.data.tokenizer.vocab_size - 2)  # a uniform guess over the words
        logger.info(
            "%s: selected epoch %d of %d (stopped by %s): L_S(T) %.4f vs uniform ln|V| %.4f, token accuracy %.3f "
            "vs chance %.3f, exact states %.3f -> %s",
            run.label,
            best["epoch"],
            len(history),
            decision.reason,
            best["val_last_ce"],
            uniform,
            best["val_token_acc"],
            chance,
            best["val_exact_acc"],
            run.out,
        )
        if best["val_last_ce"] > 0.8 * uniform:
            logger.warning("%s: the validation loss is within 20%% of a uniform guess: the model learned little "
                           "(more data, or states the captioner is sure of, would help)", run.label)  # fmt: skip
    return TrainResult(run.kind, run.out, history, decision.best_epoch, decision.reason, summary, run.model)


def train_predictor(args: TrainArgs, on_epoch_end: EpochHook | None = None) -> dict[str, TrainResult]:
    """Train the model(s) of `args`; rerunning the same arguments resumes from out/checkpoint/last.pt."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    ctx = init_distributed(args.device)
    if not ctx.is_main:
        logging.getLogger("pipeline").setLevel(logging.WARNING)  # one copy of the progress lines
    set_determinism(ctx.device)
    out = Path(args.out)
    kinds = list(BOTH) if args.model == "both" else [args.model]
    dirs = {k: (out / k if args.model == "both" else out) for k in kinds}
    # A resumed run reuses the saved tokenizer, so its ids cannot drift from the checkpoint's.
    saved = next((d for d in dirs.values() if (d / CHECKPOINT_DIR / CHECKPOINT_FILE).is_file()), None)
    tokenizer = StateTokenizer.from_file(saved) if saved is not None else None
    if tokenizer is None and args.init_from is not None:
        # Weights taken over keep their ids: a tokenizer built afresh may number the same words differently.
        tokenizer = init_tokenizer(args.init_from)
    data = prepare_data(args, tokenizer)
    results = {k: _train_one(k, args, data, dirs[k], ctx, on_epoch_end) for k in kinds}
    if args.model == "both" and ctx.is_main:
        plot_curves(
            {LABELS[k]: r.history for k, r in results.items()},
            out / BOTH_CURVE_FILE,
            uniform_cross_entropy(data.tokenizer.vocab_size),
            {LABELS[k]: r.best_epoch for k, r in results.items()},
            title=f"L_S(T) per epoch, preset {args.preset}",
        )
    if ctx.distributed:
        dist.barrier()
    return results
