"""The Attentime seed's five experiments, each beside a standard QKV transformer (GPT-2) of the same width, depth
and heads (parameters within 10%), on the same seeded data and seeds. Results: runs/bench/attentime/*.json (one
file per run: a killed job resumes where it stopped), then `report` writes the table and the loss-curve PNGs.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench.experiments.attentime.run all  # every experiment, 3 seeds
    .venv/bin/python -m bench.experiments.attentime.run exp3 --seeds 0                    # one experiment, one seed
    .venv/bin/python -m bench.experiments.attentime.run report                            # table + docs/img/attentime_*.png

Our choices where the seed is silent: AdamW (lr 1e-3, weight decay 0.01), batch 32, no dropout, cross-entropy over
the whole vocabulary at the last token, accuracy = argmax equals the target. The Attentime models have no position
table (order comes only from Time, the position being the time) and an MLP of 4.5 d instead of 4 d, which brings
their parameter count within 5% of the standard model's (GPT-2, learned positions as long as the task's longest
sequence).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2Config, GPT2Model

from bench.experiments.attentime import tasks
from models.attentime import AttentimeDecoder, PairTime

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "runs" / "bench" / "attentime"
IMG = ROOT / "docs" / "img"


# ---- models ------------------------------------------------------------------------------------------------------


class Classifier(nn.Module):
    """A causal decoder read at each row's last live token through the tied token table: ids (B, L) -> (B, V)."""

    def __init__(
        self,
        kind: str,
        vocab: int,
        d: int,
        layers: int,
        heads: int,
        max_len: int,
        dv_form: str = "separable",
        time: str = "gap",
    ) -> None:
        super().__init__()
        self.kind = kind
        if kind == "attentime":
            self.body: nn.Module = AttentimeDecoder(
                vocab, d, heads, layers, 0.0, dv_form, time, mlp_ratio=4.5
            )
        elif kind == "standard":
            cfg = GPT2Config(
                vocab_size=vocab,
                n_positions=max_len,
                n_embd=d,
                n_layer=layers,
                n_head=heads,
                n_inner=4 * d,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                activation_function="gelu",
                bos_token_id=None,
                eos_token_id=None,
            )
            self.body = GPT2Model(cfg)
        else:
            raise ValueError(f"kind must be attentime or standard, got {kind!r}")

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        h = self.body(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, d)
        last = mask.sum(dim=1) - 1  # (B,) right padding
        return h[torch.arange(ids.shape[0]), last] @ self.body.wte.weight.T  # (B, V)


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def batch(examples: list[tasks.Example]) -> tuple[Tensor, Tensor, Tensor]:
    L = max(len(e.ids) for e in examples)
    ids = torch.zeros(len(examples), L, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(examples):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
    return ids, mask, torch.tensor([e.target for e in examples])


@torch.no_grad()
def evaluate(model: Classifier, examples: list[tasks.Example]) -> dict[str, Any]:
    model.eval()
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    loss = 0.0
    for i in range(0, len(examples), 256):
        chunk = examples[i : i + 256]
        ids, mask, y = batch(chunk)
        logits = model(ids, mask)
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
        for e, ok in zip(chunk, (logits.argmax(-1) == y).tolist(), strict=True):
            hits[e.group][0] += int(ok)
            hits[e.group][1] += 1
    model.train()
    total = sum(h[0] for h in hits.values()) / max(1, sum(h[1] for h in hits.values()))
    return {"acc": total, "loss": loss / len(examples), "by_group": {g: h[0] / h[1] for g, h in hits.items()}}


def train(
    model: Classifier,
    train_set: list[tasks.Example],
    test_set: list[tasks.Example],
    epochs: int,
    seed: int,
    lr: float = 1e-3,
    params: list[nn.Parameter] | None = None,
    grad_masks: dict[int, Tensor] | None = None,
    until: list[tasks.Example] | None = None,
) -> list[dict[str, Any]]:
    """Plain AdamW loop; grad_masks (id(param) -> 0/1 tensor) keeps chosen rows of a parameter fixed; with
    `until`, stop after the first epoch that gets every example of it right."""
    opt = torch.optim.AdamW(
        params if params is not None else model.parameters(),
        lr=lr,
        weight_decay=0.0 if params is not None else 0.01,
    )
    rng = random.Random(seed)
    history = []
    for epoch in range(1, epochs + 1):
        order = list(train_set)
        rng.shuffle(order)
        t0, losses = time.perf_counter(), []
        for i in range(0, len(order), 32):
            ids, mask, y = batch(order[i : i + 32])
            loss = F.cross_entropy(model(ids, mask), y)
            opt.zero_grad()
            loss.backward()
            if grad_masks:
                for p in model.parameters():
                    if p.grad is not None and id(p) in grad_masks:
                        p.grad.mul_(grad_masks[id(p)])
            opt.step()
            losses.append(loss.item())
        ev = evaluate(model, test_set)
        history.append(
            {
                "epoch": epoch,
                "train_loss": sum(losses) / len(losses),
                "test_loss": ev["loss"],
                "test_acc": ev["acc"],
                "by_group": ev["by_group"],
                "seconds": time.perf_counter() - t0,
            }
        )
        if until is not None and evaluate(model, until)["acc"] == 1.0:
            break
    return history


def _save(name: str, payload: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(payload, indent=1))


def _done(name: str) -> bool:
    return (OUT / f"{name}.json").is_file()


VARIANTS = {
    "attentime": ("attentime", "separable"),
    "attentime_original": ("attentime", "original"),
    "standard": ("standard", "separable"),
}


def run_supervised(exp: str, seeds: list[int], variants: list[str]) -> None:
    """Experiments 1-3 (and 5's accuracy half): train each variant on the same data with the same seed."""
    spec = {
        "exp1": dict(d=64, layers=2, heads=2, epochs=15),
        "exp2": dict(d=64, layers=2, heads=2, epochs=20),
        "exp3": dict(d=192, layers=6, heads=6, epochs=30),
    }[exp]
    for seed in seeds:
        if exp == "exp1":
            train_set, test_set = (
                tasks.associative_recall(2000, seed),
                tasks.associative_recall(500, 10_000 + seed),
            )
            vocab = tasks.RECALL_VOCAB
        else:
            v = tasks.role_vocab()
            make = tasks.basic_roles if exp == "exp2" else tasks.balanced_roles
            train_set, test_set = make(200, 80, seed, v) if exp == "exp2" else make(600, 200, seed, v)
            vocab = len(v)
        for variant in variants:
            name = f"{exp}_{variant}_s{seed}"
            if _done(name):
                continue
            kind, form = VARIANTS[variant]
            torch.manual_seed(seed)
            model = Classifier(
                kind, vocab, spec["d"], spec["layers"], spec["heads"], 64 if exp == "exp1" else 16, form
            )
            t0 = time.perf_counter()
            hist = train(model, train_set, test_set, spec["epochs"], seed)
            payload = {
                "exp": exp,
                "variant": variant,
                "seed": seed,
                "params": n_params(model),
                **spec,
                "train_size": len(train_set),
                "test_size": len(test_set),
                "history": hist,
                "seconds": time.perf_counter() - t0,
            }
            if exp == "exp3" and kind == "attentime":
                payload["exp5"] = exp5_checks(model, test_set, form)
                torch.save(model.state_dict(), OUT / f"{name}.pt")
            _save(name, payload)
            print(name, f"acc {hist[-1]['test_acc']:.3f}", f"{payload['seconds']:.0f}s", flush=True)


@torch.no_grad()
def exp5_checks(model: Classifier, test_set: list[tasks.Example], form: str) -> dict[str, Any]:
    """On a trained exp3 model: cached token-by-token decoding vs one full forward (separable only), and the
    test accuracy with the Dynamic Value form switched at the same weights (they are different functions)."""
    out: dict[str, Any] = {}
    body = model.body
    ids, mask, _ = batch(test_set)
    if form == "separable":
        full = body(ids, mask).last_hidden_state
        cache, steps = None, []
        for i in range(ids.shape[1]):
            o = body(ids[:, i : i + 1], mask[:, : i + 1], cache=cache, use_cache=True)
            cache, steps = o.cache, [*steps, o.last_hidden_state]
        diff = (torch.cat(steps, 1) - full)[mask.bool()].abs()
        out["cache_max_abs_diff_float32"] = float(diff.max())
        out["cache_max_rel_to_state"] = float(diff.max() / full[mask.bool()].abs().max())
    other = "original" if form == "separable" else "separable"
    for block in body.h:
        block.attn.dv_form = other
    out[f"acc_with_{other}_form_same_weights"] = evaluate(model, test_set)["acc"]
    for block in body.h:
        block.attn.dv_form = form
    return out


# ---- 4. continual learning ----------------------------------------------------------------------------------------


def _rows_mask(param: Tensor, rows: list[int]) -> Tensor:
    m = torch.zeros_like(param)
    m[rows] = 1.0
    return m


def run_continual(seeds: list[int]) -> None:
    """Phase 1: CAT->MEOW, DOG->WOOF (everything trains). Phase 2: BIRD->CHIRP (new tokens) under four regimes.
    Phase 3, from the phase-1 model: CAT->PURRS (a new property of an existing token) with Query-Key and Time
    frozen (the seed's setting) / the standard model fully fine-tuned. Retention = accuracy on the old pairs."""
    v = tasks.animal_vocab()
    old = tasks.associations([("CAT", "MEOW"), ("DOG", "WOOF")], v)
    bird = tasks.associations([("BIRD", "CHIRP")], v)
    purr = tasks.associations([("CAT", "PURRS")], v)
    new_rows = [v.id("BIRD"), v.id("CHIRP")]
    for seed in seeds:
        name = f"exp4_s{seed}"
        if _done(name):
            continue
        res: dict[str, Any] = {"exp": "exp4", "seed": seed}
        for kind in ("attentime", "standard"):
            torch.manual_seed(seed)
            base = Classifier(
                kind, len(v), 64, 2, 2, 16, "separable", "pair" if kind == "attentime" else "gap"
            )
            p1 = train(base, old, old, 40, seed)
            res[f"{kind}_params"] = n_params(base)
            res[f"{kind}_phase1_acc"] = p1[-1]["test_acc"]
            start = {k: t.clone() for k, t in base.state_dict().items()}
            regimes = {
                "attentime": {
                    "qk_frozen": "every parameter but W_qk (the seed's 'Query-Key frozen')",
                    "time_and_new_rows": "the pair Time tables + the BIRD/CHIRP embedding rows only",
                },
                "standard": {
                    "full": "every parameter (plain fine-tuning)",
                    "new_rows": "the BIRD/CHIRP embedding rows only",
                },
            }[kind]
            for regime, what in regimes.items():
                model = Classifier(
                    kind, len(v), 64, 2, 2, 16, "separable", "pair" if kind == "attentime" else "gap"
                )
                model.load_state_dict(start)
                params, masks = _phase_params(model, regime, new_rows)
                hist = train(model, bird, old + bird, 300, seed, 3e-3, params, masks, until=bird)
                res[f"{kind}/{regime}"] = {
                    "trains": what,
                    "epochs": len(hist),
                    "new_acc": evaluate(model, bird)["acc"],
                    "old_acc": evaluate(model, old)["acc"],
                    **_drift(start, model, v),
                    "curve": [h["by_group"] for h in hist],
                }
            # phase 3: CAT -> PURRS from the phase-1 model
            model = Classifier(
                kind, len(v), 64, 2, 2, 16, "separable", "pair" if kind == "attentime" else "gap"
            )
            model.load_state_dict(start)
            if kind == "attentime":
                params = [p for n, p in model.named_parameters() if "W_qk" not in n and "time" not in n]
                what = "every parameter but W_qk and the Time tables (the seed's setting)"
            else:
                params, what = list(model.parameters()), "every parameter"
            hist = train(model, purr, old + purr, 300, seed, 3e-3, params, until=purr)
            res[f"{kind}/new_property"] = {
                "trains": what,
                "epochs": len(hist),
                "new_acc": evaluate(model, purr)["acc"],
                "old_acc_cat_meow": evaluate(model, old[: len(old) // 2])["acc"],
                "old_acc_dog_woof": evaluate(model, old[len(old) // 2 :])["acc"],
                **_drift(start, model, v),
            }
        _save(name, res)
        print(
            name,
            json.dumps(
                {
                    k: (x["old_acc"] if isinstance(x, dict) and "old_acc" in x else None)
                    for k, x in res.items()
                }
            ),
            flush=True,
        )


def _phase_params(
    model: Classifier, regime: str, rows: list[int]
) -> tuple[list[nn.Parameter], dict[int, Tensor]]:
    wte = model.body.wte.weight
    if regime == "qk_frozen":
        return [p for n, p in model.named_parameters() if "W_qk" not in n], {}
    if regime == "full":
        return list(model.parameters()), {}
    masks = {id(wte): _rows_mask(wte, rows)}
    params = [wte]
    if regime == "time_and_new_rows":
        params += [m.table for m in model.modules() if isinstance(m, PairTime)]
    return params, masks


def _drift(start: dict[str, Tensor], model: Classifier, v: tasks.Vocab) -> dict[str, float]:
    """Largest change of Query-Key weights, of the Time entries among old tokens (SAYS and the fillers are old
    tokens that BIRD sentences share), of the entries on a CAT/DOG/MEOW/WOOF row or column (pairs no BIRD sentence
    contains), and of the old tokens' embeddings."""
    now = model.state_dict()
    qk = [float((now[k] - start[k]).abs().max()) for k in start if "W_qk" in k]
    old_ids = [v.id(w) for w in ("CAT", "DOG", "SAYS", "MEOW", "WOOF", *tasks.FILLERS)]
    tim = [
        float((now[k] - start[k])[:, old_ids][:, :, old_ids].abs().max())
        for k in start
        if k.endswith("time.table")
    ]
    own = [v.id(w) for w in ("CAT", "DOG", "MEOW", "WOOF")]
    mine = [
        float(max((now[k] - start[k])[:, own].abs().max(), (now[k] - start[k])[:, :, own].abs().max()))
        for k in start
        if k.endswith("time.table")
    ]
    emb = float((now["body.wte.weight"] - start["body.wte.weight"])[old_ids].abs().max())
    out = {"old_embedding_max_change": emb}
    if qk:
        out["qk_max_change"] = max(qk)
    if tim:
        out["old_time_entries_max_change"] = max(tim)
        out["cat_dog_time_entries_max_change"] = max(mine)
    return out


# ---- report ------------------------------------------------------------------------------------------------------


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(p.read_text()) for p in sorted(OUT.glob("exp[123]_*.json"))]
    summary: dict[str, Any] = {}
    for exp, ylabel, key in (
        ("exp1", "train loss (nats)", "train_loss"),
        ("exp2", "test accuracy", "test_acc"),
        ("exp3", "test accuracy", "test_acc"),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for r in (r for r in runs if r["exp"] == exp):
            color = {"attentime": "C0", "attentime_original": "C2", "standard": "C1"}[r["variant"]]
            ys = [h[key] for h in r["history"]]
            ax.plot(
                range(1, len(ys) + 1),
                ys,
                color=color,
                alpha=0.8,
                label=r["variant"] if r["seed"] == 0 else None,
            )
            s = summary.setdefault(exp, {}).setdefault(r["variant"], [])
            s.append(
                {
                    "seed": r["seed"],
                    "params": r["params"],
                    "first_loss": r["history"][0]["train_loss"],
                    "last_loss": r["history"][-1]["train_loss"],
                    "test_acc": r["history"][-1]["test_acc"],
                    "by_group": r["history"][-1]["by_group"],
                    "seconds": r["seconds"],
                    "epoch_100": next((h["epoch"] for h in r["history"] if h["test_acc"] == 1.0), None),
                    **({"exp5": r["exp5"]} if "exp5" in r else {}),
                }
            )
        if exp == "exp1":
            ax.axhline(2.302585, color="grey", ls=":", lw=1, label="chance ln 10")
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.set_title(
            {
                "exp1": "1. associative recall (L=64, 2 layers, d=64)",
                "exp2": "2. two active-voice types",
                "exp3": "3. six construction types (6 layers, 6 heads, d=192)",
            }[exp],
            fontsize=10,
        )
        ax.legend(fontsize=8)
        fig.tight_layout()
        IMG.mkdir(parents=True, exist_ok=True)
        fig.savefig(IMG / f"attentime_{exp}.png", dpi=110)
        plt.close(fig)
    summary["exp4"] = [json.loads(p.read_text()) for p in sorted(OUT.glob("exp4_*.json"))]
    for r in summary["exp4"]:
        for x in r.values():
            if isinstance(x, dict):
                x.pop("curve", None)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("exp1", "exp2", "exp3", "exp4", "all", "report"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    todo = ["exp1", "exp2", "exp3", "exp4"] if args.what == "all" else [args.what]
    for exp in todo:
        if exp == "report":
            report()
        elif exp == "exp4":
            run_continual(args.seeds)
        else:
            variants = ["attentime", "standard"] + (["attentime_original"] if exp == "exp3" else [])
            run_supervised(exp, args.seeds, variants)
    if args.what == "all":
        report()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
