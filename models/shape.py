"""The shape every predictor shares (|V|, d_x, d_t, H, L, N, T) and the regularisers both models take, as base
dataclasses that validate themselves once for `FourTensorConfig`, `BaselineConfig` and the presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SHAPE_FIELDS = ("vocab_size", "d_x", "d_t", "n_heads", "n_layers", "N", "T")


@dataclass
class PredictorShape:
    """vocab_size: |V|, the padding id included. d_x / d_t: widths of the semantic and temporal-context fibers
    (the 1-D baseline's width is d = d_x * d_t). n_heads: H attention heads. n_layers: L Pre-LN layers.
    N: token slots per sentence. T: sentences in the input window (a stored window holds T + 1)."""

    vocab_size: int
    d_x: int
    d_t: int
    n_heads: int
    n_layers: int
    N: int
    T: int

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in SHAPE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")
        if self.vocab_size < 2:
            raise ValueError(f"{owner}.vocab_size must be at least 2, got {self.vocab_size}")

    def shape(self) -> dict[str, int]:
        """The seven shape fields as keyword arguments of any predictor config."""
        return {name: getattr(self, name) for name in SHAPE_FIELDS}


@dataclass
class PredictorConfig(PredictorShape):
    """A predictor's shape plus dropout (the single rate p of both residual branches) and padding_idx (the
    padding id: a zero row with no gradient, masked as a key, ignored as a target)."""

    dropout: float = 0.1
    padding_idx: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = type(self).__name__
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, int | float)
            or not 0 <= self.dropout < 1
        ):
            raise ValueError(f"{owner}.dropout must be a number in [0, 1), got {self.dropout!r}")
        self.dropout = float(self.dropout)
        if (
            isinstance(self.padding_idx, bool)
            or not isinstance(self.padding_idx, int)
            or not 0 <= self.padding_idx < self.vocab_size
        ):
            raise ValueError(
                f"{owner}.padding_idx must be an integer in [0, vocab_size={self.vocab_size}), "
                f"got {self.padding_idx!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
