"""`semworld demo` (what `make demo-train` runs): train a small 4-tensor predictor on the built-in world for about
a minute, then roll it out.

A seeded run on 2 CPU cores: state sequences of the built-in world -> a tokenizer and training windows -> training,
stopped early once the validation loss stops improving -> the table of epochs -> held-out histories rolled
forward, each predicted state beside the true one. It trains only the predictor, from states in words: no video,
captioner or renderer (`make demo` runs those: `semworld predict` on a world clip with the shipped weights).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from models.presets import PRESETS

if TYPE_CHECKING:
    from pipeline.tokenizer import StateTokenizer

logger = logging.getLogger(__name__)

DEMO_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "training_summary.json",
    "train_log.jsonl",
    "loss_curve.png",
    "data.jsonl",
    "checkpoint",
)


# The demo's knobs as --help lists them: (flag, default, help); each takes a value of its default's type.
KNOBS: tuple[tuple[str, str | int, str], ...] = (
    ("--out", "runs/demo", "output directory (default %(default)s)"),
    ("--scenarios", "bounce,fast,gravity,collide", "world scenarios to train on (default %(default)s)"),
    ("--clips", 200, "training sequences (default %(default)s)"),
    ("--length", 12, "states per sequence (default %(default)s)"),
    ("--preset", "small", "model shape: %(choices)s (`semworld presets` shows their sizes; default %(default)s)"),
    ("--epochs", 10, "epoch budget (default %(default)s)"),
    ("--batch-size", 32, "windows per optimizer step (default %(default)s)"),
    ("--seed", 0, "seeds the data, the split and the weights (default %(default)s)"),
    ("--threads", 1, "torch CPU threads (default %(default)s: fastest for this small model on 2 shared cores)"),
    ("--rollouts", 4, "held-out histories to roll out (default %(default)s)"),
    ("--k", 3, "states to predict per history (default %(default)s)"),
)  # fmt: skip
KNOB_OPTIONS = {"--preset": {"choices": PRESETS, "metavar": "PRESET"}}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="train a small 4-tensor predictor on the built-in world for about a minute, then roll it out",
        description=__doc__,
    )
    for flag, default, text in KNOBS:
        p.add_argument(flag, type=type(default), default=default, help=text, **KNOB_OPTIONS.get(flag, {}))
    p.add_argument(
        "--fresh", action="store_true", help="discard an earlier demo run in --out instead of resuming"
    )
    p.set_defaults(func=run_demo)


def demo_sequences(scenarios: str, n: int, seed: int, length: int, split: str) -> list[dict]:
    import world

    return world.sequences(scenarios, n, seed, length, split=split)


def as_predicted(tokenizer: StateTokenizer, state: str, N: int) -> str:
    """A true state as the rollout would write it (its N token slots, canonical spelling), so that the two
    compare as strings."""
    return tokenizer.spell(tokenizer.encode_states([state], N).ids[0])


def run_demo(ns: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from pipeline.cli.train import print_epoch_table
    from pipeline.predictor import Predictor
    from pipeline.training.args import TrainArgs
    from pipeline.training.predictor import train_predictor

    console = Console()
    out = Path(ns.out)
    if ns.fresh:
        for name in DEMO_FILES:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    out.mkdir(parents=True, exist_ok=True)

    # 1. Data: world state sequences, written as JSONL so `semworld eval predictor` can read the same file.
    data = out / "data.jsonl"
    records = demo_sequences(ns.scenarios, ns.clips, ns.seed, ns.length, "train")
    data.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "clip"}) + "\n" for r in records))
    console.print(
        f"[bold]semworld demo[/]: {len(records)} sequences of {ns.length} states ({ns.scenarios}) -> {data}"
    )
    console.print(f"  e.g. {records[0]['states'][0]}")

    # 2. Training (resumes if an earlier demo run was interrupted).
    args = TrainArgs(
        data=str(data),
        preset=ns.preset,
        out=str(out),
        epochs=ns.epochs,
        batch_size=ns.batch_size,
        seed=ns.seed,
        val_fraction=0.1,
        threads=ns.threads,
    )
    results = train_predictor(args)
    print_epoch_table(results)

    # 3. Rollout on held-out histories (the world's test split): predicted vs true next states.
    predictor = Predictor.from_pretrained(out, device="cpu")
    T, k = predictor.T, ns.k
    held_out = demo_sequences(ns.scenarios, max(ns.rollouts, 1), ns.seed, T + k, "test")[: ns.rollouts]
    histories = [r["states"][:T] for r in held_out]
    predicted = predictor.predict(histories, k=k, truncate=True)
    hits = total = 0
    for i, (rec, pred) in enumerate(zip(held_out, predicted)):
        table = Table(
            title=f"held-out history {i + 1} ({rec.get('scenario', 'built-in')}): last state "
            f"'{rec['states'][T - 1]}'",
            show_lines=False,
        )
        table.add_column("step", justify="right")
        table.add_column("predicted")
        table.add_column("true")
        table.add_column("", justify="center")
        for j in range(k):
            true = as_predicted(predictor.tokenizer, rec["states"][T + j], predictor.N)
            same = pred[j] == true
            hits, total = hits + same, total + 1
            table.add_row(f"+{j + 1}", pred[j], true, "[green]=[/]" if same else "[red]x[/]")
        console.print(table)
    best = results["four_tensor"].best
    console.print(
        f"selected epoch {best['epoch']}: validation L_S(T) {best['val_last_ce']:.3f} nats/token "
        f"(uniform {results['four_tensor'].summary['uniform_ce']:.3f}), exact next state "
        f"{best['val_exact_acc']:.1%}; rollout states matched {hits}/{total}"
    )
    console.print(
        f"weights, tokenizer, log and curve in {out}; score them with: semworld eval predictor "
        f"--weights {out} --data {data} --split val"
    )
    return 0
