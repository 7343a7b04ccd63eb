"""Stand-in stages for API tests: fast, deterministic, and with the same interfaces as the real ones.

`make_pipeline` is also a `SEMWORLD_PIPELINE_FACTORY` target, for servers started in a subprocess.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import torch

from pipeline.world_model import WorldModelPipeline


class BrightnessCaptioner:
    def caption(self, frames: list[np.ndarray]) -> list[str]:
        return [f"a scene of brightness {int(f.mean()) // 16}." for f in frames]


class EchoPredictor:
    def predict(self, states: list[list[str]], k: int) -> list[list[str]]:
        return [[f"next {i} after {seq[-1]}" for i in range(k)] for seq in states]


class NoiseRenderer:
    """Seeded noise frames; `delay` seconds per batch, and an optional gate it waits on (to hold a job)."""

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        self.delay = delay
        self.gate = gate
        self.calls = 0

    def render(self, states, generator=None, steps=None, guidance=None):
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(30)
        if self.delay:
            time.sleep(self.delay)
        g = generator or torch.Generator().manual_seed(0)
        return [(torch.rand(24, 32, 3, generator=g) * 255).to(torch.uint8).numpy() for _ in states]


def make_pipeline(delay: float | None = None) -> WorldModelPipeline:
    delay = float(os.environ.get("FAKE_RENDER_DELAY", "0")) if delay is None else delay
    return WorldModelPipeline(
        BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(delay), render_batch_size=2
    )
