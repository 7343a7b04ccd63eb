"""`semworld train predictor`: train the 4-tensor model, the 1-D baseline, or both on state sequences.

Works under torchrun (`torchrun --nproc_per_node=K -m pipeline.cli train predictor ...`): one replica per
process, DistributedDataParallel (gloo on CPU, nccl on CUDA), rank 0 writes every file.
"""

from __future__ import annotations

import argparse

from pipeline.training import all as train_all
from pipeline.training import captioner as train_captioner
from pipeline.training import renderer as train_renderer
from pipeline.training.predictor import LABELS, TrainArgs, TrainResult, train_predictor


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train` and its `predictor` subcommand."""
    train = sub.add_parser("train", help="train a model")
    train_sub = train.add_subparsers(dest="train_what", metavar="WHAT")
    train.set_defaults(func=lambda args: (train.print_help(), 2)[1])
    # The shipped models' trainers each add their own subcommand: captioner, renderer, all.
    train_captioner.add_parser(train_sub)
    train_renderer.add_parser(train_sub)
    train_all.add_parser(train_sub)

    p = train_sub.add_parser(
        "predictor",
        help="train the state predictor (4-tensor, baseline, or both)",
        description="Train a predictor on state sequences; rerun the same command to resume after a kill.",
    )
    p.add_argument("--data", required=True, help='.jsonl ({"states": [...]} per line) or ROCStories .csv')
    p.add_argument(
        "--format",
        dest="data_format",
        choices=("jsonl", "rocstories"),
        default=None,
        help="override the format the file extension implies",
    )
    p.add_argument("--preset", required=True, help="model shape (see `semworld presets`)")
    p.add_argument(
        "--out", required=True, help="output directory (weights, tokenizer.json, logs, checkpoint)"
    )
    p.add_argument("--model", choices=("four_tensor", "baseline", "both"), default="four_tensor")
    p.add_argument("--epochs", type=int, default=TrainArgs.epochs, help="epoch budget (default %(default)s)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=TrainArgs.batch_size,
        help="windows per step on each process (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=TrainArgs.seed)
    p.add_argument(
        "--causal-slices",
        action="store_true",
        help="4-tensor only, beyond the paper: slice t may not attend to later slices t' > t",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=TrainArgs.val_fraction,
        help="share of sequences held out for validation (default %(default)s)",
    )
    p.add_argument("--max-windows", type=int, default=None, help="cap on training windows (seeded choice)")
    p.add_argument("--lr", type=float, default=TrainArgs.lr, help="AdamW learning rate (default %(default)s)")
    p.add_argument("--weight-decay", type=float, default=TrainArgs.weight_decay)
    p.add_argument("--dropout", type=float, default=TrainArgs.dropout)
    p.add_argument(
        "--patience",
        type=int,
        default=TrainArgs.patience,
        help="stopping rule: epochs since the minimum (default %(default)s)",
    )
    p.add_argument(
        "--min-frequency",
        type=int,
        default=TrainArgs.min_frequency,
        help="rarer words become [UNK] (default %(default)s)",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads per process (default: torch's)"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    m = p.add_argument_group("tensor memory (4-tensor only; docs/tensor-memory.md)")
    m.add_argument("--memory", action="store_true", help="add a tensor memory for what has left the window")
    m.add_argument("--mem-channels", type=int, default=TrainArgs.mem_channels, help="C (default %(default)s)")
    m.add_argument("--mem-shape", type=int, nargs=3, metavar=("D", "H", "W"), default=list(TrainArgs.mem_shape),
                   help="memory grid (default 4 4 4)")
    m.add_argument("--chunk-size", type=int, default=TrainArgs.chunk_size,
                   help="tokens per memory step (default %(default)s = one state)")
    m.add_argument("--sigma-scale", type=float, default=TrainArgs.sigma_scale, help="write spread multiplier")
    m.add_argument("--memory-every-n-layers", type=int, default=TrainArgs.memory_every_n_layers)
    m.add_argument("--forget-bias", type=float, default=TrainArgs.forget_bias,
                   help="initial forget-gate bias (beyond the seed, whose bias is 0; default %(default)s)")
    m.add_argument("--memory-lr-scale", type=float, default=TrainArgs.memory_lr_scale,
                   help="learning rate of the memory's parameters = lr x this (default %(default)s)")
    p.add_argument("--init-from", default=None, help="start from the weights of this saved predictor folder")
    m.add_argument("--bptt-windows", type=int, default=TrainArgs.bptt_windows,
                   help="windows per truncated back-propagation segment (default %(default)s)")
    p.set_defaults(func=run_train_predictor)


def args_from_namespace(ns: argparse.Namespace) -> TrainArgs:
    return TrainArgs(
        data=ns.data,
        preset=ns.preset,
        out=ns.out,
        model=ns.model,
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        seed=ns.seed,
        causal_slices=ns.causal_slices,
        val_fraction=ns.val_fraction,
        max_windows=ns.max_windows,
        lr=ns.lr,
        weight_decay=ns.weight_decay,
        dropout=ns.dropout,
        patience=ns.patience,
        min_frequency=ns.min_frequency,
        data_format=ns.data_format,
        device=ns.device,
        threads=ns.threads,
        progress=ns.progress,
        memory=ns.memory,
        mem_channels=ns.mem_channels,
        mem_shape=tuple(ns.mem_shape),
        chunk_size=ns.chunk_size,
        sigma_scale=ns.sigma_scale,
        memory_every_n_layers=ns.memory_every_n_layers,
        bptt_windows=ns.bptt_windows,
        forget_bias=ns.forget_bias,
        memory_lr_scale=ns.memory_lr_scale,
        init_from=ns.init_from,
    )


def print_epoch_table(results: dict[str, TrainResult]) -> None:
    """One rich table per model: every epoch, the selected one starred."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for kind, res in results.items():
        table = Table(title=f"{LABELS[kind]} -> {res.out}  (stopped by {res.stopped_by})")
        for col in ("epoch", "train loss", "val selection", "val L_S(T)", "token acc", "exact acc", "s"):
            table.add_column(col, justify="right")
        for i, rec in enumerate(res.history):
            mark = "*" if i == res.best_epoch else ""
            table.add_row(
                f"{rec['epoch']}{mark}",
                f"{rec['train_loss']:.4f}",
                f"{rec['val_selection_loss']:.4f}",
                f"{rec['val_last_ce']:.4f}",
                f"{rec['val_token_acc']:.3f}",
                f"{rec['val_exact_acc']:.3f}",
                f"{rec['seconds']:.1f}",
            )
        console.print(table)
        console.print(
            f"selected epoch {res.best['epoch']}: L_S(T) {res.best['val_last_ce']:.4f} "
            f"vs uniform ln|V| {res.summary['uniform_ce']:.4f}"
        )


def run_train_predictor(ns: argparse.Namespace) -> int:
    results = train_predictor(args_from_namespace(ns))
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        print_epoch_table(results)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0
