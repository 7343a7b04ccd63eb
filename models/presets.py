"""Named model shapes in one registry: the paper's three configurations and small CPU presets.

A preset fixes the shape shared by the 4-tensor predictor and its 1-D baseline (|V|, d_x, d_t, H, L, N, T);
each model builds its own config from it. Counts are taken on the meta device, so nothing is allocated.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from models.four_tensor import FourTensorConfig
from models.four_tensor import count_parameters as count_four_tensor

PAPER_VOCAB = 36_711  # ROCStories pool, frequency >= 1 (section 8.1)


@dataclass(frozen=True)
class Preset:
    """One named shape. vocab_size is nominal for the CPU presets: training replaces it with the tokenizer's."""

    name: str
    summary: str
    vocab_size: int
    d_x: int
    d_t: int
    n_heads: int
    n_layers: int
    N: int
    T: int
    # Parameter counts the paper reports, in millions (table 5), keyed by model kind.
    paper_params_m: dict[str, float] = field(default_factory=dict)

    def shape(self) -> dict[str, Any]:
        """The keyword arguments both model configs take."""
        d = asdict(self)
        return {k: d[k] for k in ("vocab_size", "d_x", "d_t", "n_heads", "n_layers", "N", "T")}


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", "tests and smoke runs (seconds on CPU)", 512, 8, 4, 2, 1, 8, 3),
        Preset("small", "quick CPU training on a few thousand windows", 4096, 16, 8, 2, 2, 16, 4),
        Preset("medium", "overnight CPU training, d = 512", 8192, 32, 16, 2, 2, 16, 4),
        Preset("paper-h2-l2", "paper table 5, H=2 L=2", PAPER_VOCAB, 64, 32, 2, 2, 16, 4,
               {"four_tensor": 122.2, "baseline": 175.9}),
        Preset("paper-h4-l2", "paper table 5, H=4 L=2 (closest parameter match)", PAPER_VOCAB, 64, 32, 4, 2, 16, 4,
               {"four_tensor": 172.5, "baseline": 175.9}),
        Preset("paper-h4-l3", "paper table 5, H=4 L=3", PAPER_VOCAB, 64, 32, 4, 3, 16, 4,
               {"four_tensor": 256.4, "baseline": 226.2}),
    )
}


def get_preset(name: str) -> Preset:
    """The preset called name; a ValueError lists the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}") from None


def four_tensor_config(name: str, **overrides: Any) -> FourTensorConfig:
    """FourTensorConfig of a preset; overrides (vocab_size, end_ids, dropout, slice_causal, ...) win."""
    return FourTensorConfig(**{**get_preset(name).shape(), **overrides})


def _count_baseline(preset: Preset) -> int | None:
    """Baseline count on the meta device, or None while models.baseline is not part of this checkout."""
    try:
        baseline = importlib.import_module("models.baseline")
    except ModuleNotFoundError as err:
        if err.name in ("models.baseline",):
            return None
        raise
    config = baseline.BaselineConfig(**preset.shape())
    if hasattr(baseline, "count_parameters"):
        return int(baseline.count_parameters(config))
    with torch.device("meta"):
        model = baseline.BaselineModel(config)
    return sum(p.numel() for p in model.parameters())


def parameter_counts(name: str) -> dict[str, int | None]:
    """{"four_tensor": n, "baseline": n or None} for the preset called name."""
    preset = get_preset(name)
    return {
        "four_tensor": count_four_tensor(FourTensorConfig(**preset.shape())),
        "baseline": _count_baseline(preset),
    }
