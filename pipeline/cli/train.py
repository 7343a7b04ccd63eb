"""`semworld train predictor|captioner|renderer|pixel|all`: each command's flags are its arguments dataclass's fields
(pipeline.training.args), derived by pipeline.cli.flags.

`train predictor` trains the 4-tensor model, the 1-D baseline, or both on state sequences; `train pixel` the
pixel-space baseline that semworld is compared with (`semworld eval compare`).

Works under torchrun (`torchrun --nproc_per_node=K -m pipeline.cli train predictor ...`): one replica per
process, DistributedDataParallel (gloo on CPU, nccl on CUDA), rank 0 writes every file.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from models.presets import PRESETS
from pipeline.cli.flags import add_dataclass_flags, dataclass_from_namespace
from pipeline.data import FORMATS
from pipeline.training.args import MEMORY_FLAG_NAMES, MODEL_KINDS, TrainAllArgs, TrainArgs
from pipeline.training.image_args import TrainCaptionerArgs, TrainPixelArgs, TrainRendererArgs

if TYPE_CHECKING:
    from pipeline.training.predictor import TrainResult


# (command, arguments dataclass, help, description, extra options of add_dataclass_flags); runners below.
COMMANDS: tuple[tuple[str, type, str, str, dict[str, Any]], ...] = (
    ("predictor", TrainArgs, "train the state predictor (4-tensor, baseline, or both)",
     "Train a predictor on state sequences; rerun the same command to resume after a kill.",
     {"flags": {"data_format": "--format", **{k: "--" + v.replace("_", "-") for k, v in MEMORY_FLAG_NAMES.items()}},
      "choices": {"model": (*MODEL_KINDS, "both"), "data_format": FORMATS, "preset": tuple(PRESETS)}}),
    ("captioner", TrainCaptionerArgs, "train the embedded BLIP captioner on world frames",
     "Train the embedded captioner (tiny BLIP) on random world frames; resumable.", {}),
    ("renderer", TrainRendererArgs, "train the embedded diffusion renderer on world frames",
     "Train the embedded renderer (VAE, then UNet + text encoder) on world frames; resumable.", {}),
    ("pixel", TrainPixelArgs, "train the pixel-space baseline (SimVP-style) on world clips",
     "Train the pixel-space video predictor that semworld is compared with (`semworld eval compare`); resumable.",
     {}),
    ("all", TrainAllArgs, "rebuild every shipped model (captioner, renderer, predictor) from scratch",
     "Rebuild the shipped weights folder from the recipes of models.presets, seeded and resumable "
     "(rerun the same command to resume).", {}),
)  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    """Add `train` and its subcommands; each one's flags are its arguments dataclass's fields."""
    train = sub.add_parser("train", help="train a model")
    train_sub = train.add_subparsers(dest="train_what", metavar="WHAT")
    train.set_defaults(func=lambda args: (train.print_help(), 2)[1])
    runners = {"predictor": run_train_predictor, "captioner": run_train_captioner,
               "renderer": run_train_renderer, "pixel": run_train_pixel, "all": run_train_all}  # fmt: skip
    for name, cls, help_text, description, options in COMMANDS:
        p = train_sub.add_parser(name, help=help_text, description=description)
        add_dataclass_flags(p, cls, **options)
        p.set_defaults(func=runners[name])


def run_train_captioner(ns: argparse.Namespace) -> int:
    from pipeline.training.captioner import train_captioner

    train_captioner(dataclass_from_namespace(TrainCaptionerArgs, ns))
    return 0


def run_train_renderer(ns: argparse.Namespace) -> int:
    from pipeline.training.renderer import train_renderer

    train_renderer(dataclass_from_namespace(TrainRendererArgs, ns))
    return 0


def run_train_pixel(ns: argparse.Namespace) -> int:
    from pipeline.training.pixel import train_pixel

    summary = train_pixel(dataclass_from_namespace(TrainPixelArgs, ns))
    print(
        f"pixel model in {summary['weights']}: {summary['steps_done']} steps, "
        f"{summary['cpu_seconds_total'] / 60:.1f} CPU-minutes, val rollout MSE {summary['eval']['mse']:.5f}"
    )
    return 0


def run_train_all(ns: argparse.Namespace) -> int:
    from pipeline.training.all import train_all

    args = dataclass_from_namespace(TrainAllArgs, ns)
    report = train_all(args)
    print(f"weights in {args.out}: {report['total_mb']} MB in all")
    return 0


def print_epoch_table(results: dict[str, TrainResult]) -> None:
    """One rich table per model: every epoch, the selected one starred."""
    from rich.console import Console
    from rich.table import Table

    from pipeline.training.predictor import LABELS

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
    from pipeline.training.predictor import train_predictor

    results = train_predictor(dataclass_from_namespace(TrainArgs, ns))
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        print_epoch_table(results)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0
