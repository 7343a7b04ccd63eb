"""The tensor memory alone learns to recall: a key chunk, `gap` chunks of noise, a cue chunk; a linear head on the
cue's memory read must name the key (8 keys, chance 12.5%). Trains the interface + head with Adam for 600 steps.

    python -m bench.experiments.memory_unit_recall GAP FORGET_BIAS  # e.g. 1 0, 8 0 (docs/history.md reports what it found)
"""

from __future__ import annotations

import argparse

import torch

from models.tensor_memory import TensorMemoryConfig, TensorMemoryInterface


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gap", type=int, help="noise chunks between the key and the cue")
    p.add_argument("forget_bias", type=float, nargs="?", default=0.0)
    p.add_argument("--steps", type=int, default=600)
    ns = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    E, K, gap, fb = 32, 4, ns.gap, ns.forget_bias
    cfg = TensorMemoryConfig(d_emb=E, mem_channels=16, mem_shape=(4, 4, 4), chunk_size=K, forget_bias=fb)
    mem = TensorMemoryInterface(cfg)
    keys = torch.randn(8, E)
    head = torch.nn.Linear(E, 8)
    opt = torch.optim.Adam(list(mem.parameters()) + list(head.parameters()), lr=3e-3)
    for step in range(ns.steps + 1):
        B = 64
        y = torch.randint(0, 8, (B,))
        tok = torch.randn(B, (gap + 2) * K, E) * 0.3  # (B, n, E)
        tok[:, :K] += keys[y][:, None]  # key chunk
        tok[:, -K:] += 2.0  # cue chunk
        out, _ = mem(tok)  # (B, n, E)
        logits = head(out[:, -1])  # (B, 8)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 150 == 0:
            acc = (logits.argmax(-1) == y).float().mean().item()
            print(f"gap {gap} forget_bias {fb} step {step}: loss {loss.item():.3f} acc {acc:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
