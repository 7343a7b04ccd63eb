"""Recall probe beyond the window for the tensor-memory predictor (docs/tensor-memory.md).

A probe clip shows a key state (one of 20 objects, `COLOUR SHAPE middle center .`), then `empty .` states, then
the cue `screen .`, and the next state must repeat the key. With the window of T = 4 states, the key is shown
k windows before the answer: it sits k*T + 1 states back, so for every k >= 1 it has left the window and only a
memory can bring it back (chance: 1 in 20). A memory predictor (preset small) is trained on such clips with
k drawn from 1..8, then scored on fresh clips for each k with its memory, and with the memory read dropped at
test time (the ablation: writes still run, reads are zeroed).

    python -m bench.experiments.memory_recall --out runs/memory/recall                   # data, training (resumable), scores
    python -m bench.experiments.memory_recall --out runs/memory/recall --eval-only
    python -m bench.experiments.memory_recall --out runs/memory/recall_k1 --train-k 1-1  # the easiest case alone
    python -m bench.experiments.memory_recall --out runs/memory/recall --init-from runs/memory/recall_k1/model  # curriculum
"""

from __future__ import annotations

import argparse
import json
import logging
import random
from pathlib import Path

import torch

from pipeline.predictor import Predictor
from pipeline.training.args import (
    RECALL_TARGETS,
    TrainArgs,
)
from pipeline.training.predictor import train_predictor
from pipeline.utils import canonical_state as canonical

COLOURS = ("red", "orange", "green", "blue", "purple")
SHAPES = ("ball", "box", "triangle", "diamond")
KEYS = tuple(f"{c} {s} middle center ." for c in COLOURS for s in SHAPES)
FILLER, CUE = "empty .", "screen ."


def probe_clip(k: int, rng: random.Random, T: int = 4, tail: int = 2) -> tuple[list[str], int]:
    """States of one probe clip and the index of its answer: key, k*T - 1 fillers, the cue, the key again."""
    key = rng.choice(KEYS)
    states = [key] + [FILLER] * (k * T - 1) + [CUE, key] + [FILLER] * tail
    return states, k * T + 1


def write_probe(path: Path, n: int, seed: int, ks: range, tail: int = 2) -> list[tuple[list[str], int, int]]:
    rng = random.Random(seed)
    clips = []
    with path.open("w") as fh:
        for i in range(n):
            k = ks[i % len(ks)]
            states, answer = probe_clip(k, rng, tail=tail)
            clips.append((states, answer, k))
            fh.write(json.dumps({"id": f"probe{seed}-{i}", "states": states, "k": k}) + "\n")
    return clips


def score(predictor: Predictor, clips: list[tuple[list[str], int, int]]) -> dict[str, float]:
    """Exact match (world spelling) of the predicted answer state by k, from the true history before it."""
    by_k: dict[int, list[tuple[list[str], int]]] = {}
    for states, answer, k in clips:
        by_k.setdefault(k, []).append((states, answer))
    rates = {}
    for k, group in sorted(by_k.items()):
        preds = predictor.predict(
            [s[:a] for s, a in group], 1
        )  # one batch: every history has the same length
        hits = [canonical(p[0]) == canonical(s[a]) for p, (s, a) in zip(preds, group)]
        rates[str(k)] = sum(hits) / len(hits)
    return rates


@torch.no_grad()
def answer_features(predictor: Predictor, clips: list[tuple[list[str], int, int]]) -> torch.Tensor:
    """The final hidden states of the slots that spell the answer's colour and shape (slots 0 and 1 of the last
    slice), from the whole history streamed through the memory: (n, 2 * d). One batch per history length."""
    model = predictor.model
    T = predictor.T
    out = torch.empty(len(clips), 2 * model.config.d_x * model.config.d_t)
    by_len: dict[int, list[int]] = {}
    for i, (_, answer, _) in enumerate(clips):
        by_len.setdefault(answer, []).append(i)
    for length, rows in by_len.items():
        ids = predictor.encode_histories([clips[i][0][:length] for i in rows], keep=length)  # (b, L, N)
        state = model.stream_memory(ids)
        X, _ = model.memory_hidden_states(ids[:, -T:], state)  # (b, N, T, d_x, d_t)
        out[rows] = X[:, :2, -1].flatten(1)
    return out


def linear_probe(
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    steps: int = 400,
    seed: int = 0,
) -> float:
    """Held-out accuracy of a softmax regression (features standardised on train) from features to key index:
    whether the key is in the answer slots at all, whatever the model's own readout makes of it."""
    (x, y), (xt, yt) = train, test
    mean, std = x.mean(0), x.std(0) + 1e-6
    x, xt = (x - mean) / std, (xt - mean) / std
    torch.manual_seed(seed)
    head = torch.nn.Linear(x.shape[1], len(KEYS))
    opt = torch.optim.Adam(head.parameters(), lr=1e-2, weight_decay=1e-3)
    with torch.enable_grad():
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(head(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return float((head(xt).argmax(-1) == yt).float().mean())


def probe_scores(
    predictor: Predictor, train: list[tuple[list[str], int, int]], test: list[tuple[list[str], int, int]]
) -> dict[str, float]:
    """linear_probe by k: fitted on the training clips of that k (all of them if it has none), scored on test."""

    def labels(clips: list[tuple[list[str], int, int]]) -> torch.Tensor:
        return torch.tensor([KEYS.index(s[0]) for s, _, _ in clips])

    x_train, y_train = answer_features(predictor, train), labels(train)
    k_train = torch.tensor([k for _, _, k in train])
    rates = {}
    for k in sorted({k for _, _, k in test}):
        group = [c for c in test if c[2] == k]
        rows = k_train == k if bool((k_train == k).any()) else torch.ones_like(k_train, dtype=torch.bool)
        rates[str(k)] = linear_probe(
            (x_train[rows], y_train[rows]), (answer_features(predictor, group), labels(group))
        )
    return rates


def k_range(text: str) -> range:
    """'3' -> range(3, 4); '1-8' -> range(1, 9) (k >= 1: the key has left the window)."""
    lo, _, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K or K1-K2, got {text!r}") from None
    if not 1 <= a <= b:
        raise argparse.ArgumentTypeError(f"need 1 <= K1 <= K2, got {text!r}")
    return range(a, b + 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/memory/recall")
    p.add_argument("--train-clips", type=int, default=2400)
    p.add_argument("--test-clips", type=int, default=400, help="per k")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--bptt-windows", type=int, default=32, help="32: the whole of the longest probe clip")
    p.add_argument("--batch-size", type=int, default=128, help="windows per step (clips = batch / bptt)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--forget-bias", type=float, default=0.0)
    p.add_argument("--memory-lr-scale", type=float, default=1.0)
    p.add_argument("--min-sigma", type=float, default=0.0, help="floor on the writer's spread (grid units)")
    p.add_argument("--memory-gate-init", type=float, default=-2.0, help="gate logit at init (the seed's -2)")
    p.add_argument(
        "--memory-recall-weight",
        type=float,
        default=0.0,
        help="weight of the recall term (the memory spells the last state written; 0: off)",
    )
    p.add_argument(
        "--memory-recall-target",
        choices=RECALL_TARGETS,
        default="last",
        help="what the recall term asks for: last (the state written just before the window) or novel "
        "(the latest state written that the window does not show again: the key, past the fillers)",
    )
    p.add_argument(
        "--target-slices",
        choices=("all", "last"),
        default="last",
        help="last: the loss on S(T) alone (the answer is a last-slot target; with all, 3 of 4 "
        "targets of a window are copies of the next input slice)",
    )
    p.add_argument("--train-k", type=k_range, default=range(1, 9), help="k of the training clips: K or K1-K2")
    p.add_argument("--test-k", type=k_range, default=range(1, 9), help="k scored: K or K1-K2")
    p.add_argument("--init-from", default=None, help="start from this memory predictor (a curriculum step)")
    p.add_argument(
        "--tail",
        type=int,
        default=2,
        help="filler states after the answer in the training clips (0: a clip ends at its answer)",
    )
    p.add_argument("--eval-only", action="store_true")
    p.add_argument(
        "--linear-probe",
        action="store_true",
        help="also fit a softmax regression from the answer slots' hidden states to the key (fitted on "
        "the training clips, scored on the test clips), with the memory and with its read zeroed",
    )
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(ns.threads)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    ks = ns.test_k
    if ns.tail < 0:
        p.error(f"--tail must be >= 0, got {ns.tail}")
    train = write_probe(out / "train.jsonl", ns.train_clips, seed=0, ks=ns.train_k, tail=ns.tail)
    test = write_probe(out / "test.jsonl", ns.test_clips * len(ks), seed=1, ks=ks)
    model_dir = out / "model"
    if not ns.eval_only:
        # flags named as TrainArgs' fields
        passed = "epochs batch_size lr threads bptt_windows memory_lr_scale memory_recall_weight".split()
        passed += "memory_recall_target target_slices init_from".split()
        memory = {"forget_bias": ns.forget_bias, "min_sigma": ns.min_sigma, "gate_init": ns.memory_gate_init}
        train_predictor(TrainArgs(data=str(out / "train.jsonl"), preset="small", out=str(model_dir), seed=0,
                                  progress=False, memory=memory, **{k: getattr(ns, k) for k in passed}))  # fmt: skip
    predictor = Predictor.from_pretrained(model_dir, device="cpu")
    with_memory = score(predictor, test)
    probe: dict[str, dict[str, float]] = {}
    if ns.linear_probe:
        probe["with_memory"] = probe_scores(predictor, train, test)
    predictor.model.memory_read_off = True
    zeroed = score(predictor, test)
    if ns.linear_probe:
        probe["memory_read_zeroed"] = probe_scores(predictor, train, test)
    result = {
        "k": list(ks),
        "with_memory": with_memory,
        "memory_read_zeroed": zeroed,
        "chance": 1 / len(KEYS),
        "test_clips_per_k": ns.test_clips,
        "train_clips": ns.train_clips,
        "epochs": ns.epochs,
        "bptt_windows": ns.bptt_windows,
        "forget_bias": ns.forget_bias,
        "min_sigma": ns.min_sigma,
        "memory_gate_init": ns.memory_gate_init,
        "memory_recall_weight": ns.memory_recall_weight,
        "memory_recall_target": ns.memory_recall_target,
        "tail": ns.tail,
        "memory_lr_scale": ns.memory_lr_scale,
        "target_slices": ns.target_slices,
        "train_k": [ns.train_k.start, ns.train_k.stop - 1],
        "init_from": ns.init_from,
    }
    if probe:
        result["linear_probe"] = probe
    (out / "recall.json").write_text(json.dumps(result, indent=2) + "\n")
    print("k            " + " ".join(f"{k:>6}" for k in ks))
    print("with memory  " + " ".join(f"{100 * with_memory[str(k)]:6.1f}" for k in ks))
    print("read zeroed  " + " ".join(f"{100 * zeroed[str(k)]:6.1f}" for k in ks))
    for name, rates in probe.items():
        print(
            f"linear probe, {name.replace('_', ' ')}: " + " ".join(f"{100 * rates[str(k)]:6.1f}" for k in ks)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
