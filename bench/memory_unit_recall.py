"""The tensor memory alone learns to recall: a key chunk, `gap` chunks of noise, a cue chunk; a linear head on the
cue's memory read must name the key (8 keys, chance 12.5%). Trains the interface + head with Adam for 600 steps.

    python bench/memory_unit_recall.py GAP FORGET_BIAS      # e.g. 1 0, 8 0 (docs/tensor-memory.md)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from models.tensor_memory import TensorMemoryConfig, TensorMemoryInterface  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
E, K, gap = 32, 4, int(sys.argv[1])
fb = float(sys.argv[2])
cfg = TensorMemoryConfig(d_emb=E, mem_channels=16, mem_shape=(4, 4, 4), chunk_size=K, forget_bias=fb)
mem = TensorMemoryInterface(cfg)
keys = torch.randn(8, E)
head = torch.nn.Linear(E, 8)
opt = torch.optim.Adam(list(mem.parameters()) + list(head.parameters()), lr=3e-3)
for step in range(601):
    B = 64
    y = torch.randint(0, 8, (B,))
    tok = torch.randn(B, (gap + 2) * K, E) * 0.3
    tok[:, :K] += keys[y][:, None]
    tok[:, -K:] += 2.0  # cue chunk
    out, _ = mem(tok)
    logits = head(out[:, -1])
    loss = torch.nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 150 == 0:
        acc = (logits.argmax(-1) == y).float().mean().item()
        print(f"gap {gap} forget_bias {fb} step {step}: loss {loss.item():.3f} acc {acc:.3f}", flush=True)
