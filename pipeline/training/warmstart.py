"""Starting a predictor run from saved weights (`--init-from`): the saved tokenizer, the weights copied in, and
`--grow-layer`, which inserts a layer that starts as the identity so the grown model computes the saved one's
function."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pipeline.tokenizer import StateTokenizer
from pipeline.utils import UserError

logger = logging.getLogger(__name__)


def init_tokenizer(directory: str | Path) -> StateTokenizer:
    """The tokenizer saved beside the --init-from weights (their embedding rows are numbered by it)."""
    if not (Path(directory) / "tokenizer.json").is_file():
        raise UserError(f"--init-from {directory}: no tokenizer.json there (the weights' ids need it)")
    return StateTokenizer.from_file(directory)


def _shift_layers(saved: dict[str, torch.Tensor], at: int) -> dict[str, torch.Tensor]:
    """saved's weights with every layer (and memory tap) numbered `at` or more moved one down: layers.2.fc1.weight
    -> layers.3.fc1.weight for at <= 2."""

    def shifted(key: str) -> str:
        m = re.fullmatch(r"(layers|memory_taps)\.(\d+)(\..*)?", key)
        if m is None or int(m.group(2)) < at:
            return key
        return f"{m.group(1)}.{int(m.group(2)) + 1}{m.group(3) or ''}"

    return {shifted(k): v for k, v in saved.items()}


def _identity_layer(model: Any, at: int) -> None:
    """Layer `at` of a 4-tensor model adds nothing to its input: the attention's values and the MLP's output are
    zero, so both residual branches are zero until training moves them (queries, keys and fc1 keep their init)."""
    layer = model.layers[at]
    with torch.no_grad():
        layer.attention.W_V.zero_()
        layer.fc2.weight.zero_()
        layer.fc2.bias.zero_()


def init_weights(model: Any, directory: str | Path, grow_layer: int | None = None) -> None:
    """Copy the weights of a saved predictor into model; the memory's own weights may be absent (fresh).

    grow_layer: the saved predictor has one layer fewer; model's layer grow_layer is new and starts as the
    identity, the saved layers (and their memory taps) from that index on fill the ones after it.
    """
    from safetensors.torch import load_file

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"--init-from {directory}: no model.safetensors there")
    saved = load_file(str(path))
    own = model.state_dict()
    fresh: tuple[str, ...] = ("memory.", "memory_taps.")
    if grow_layer is not None:
        n_saved = len({k.split(".")[1] for k in saved if k.startswith("layers.")})
        n_own = len(model.layers)
        if n_own != n_saved + 1 or not 0 <= grow_layer < n_own:
            raise UserError(
                f"--grow-layer {grow_layer}: the model has {n_own} layers and {directory} has "
                f"{n_saved}; growing needs one more layer and an index below {n_own}"
            )
        saved = _shift_layers(saved, grow_layer)
        taps = {k.split(".")[1] for k in own if k.startswith("memory_taps.")}
        saved_taps = {k.split(".")[1] for k in saved if k.startswith("memory_taps.")}
        if saved_taps and taps != saved_taps:
            raise UserError(
                f"--grow-layer {grow_layer}: the memory taps would sit at layers {sorted(taps)} but "
                f"the saved ones move to {sorted(saved_taps)}; choose --memory-every-n-layers so "
                "that the new layer has none"
            )
        fresh = (*fresh, f"layers.{grow_layer}.")
    missing = sorted(k for k in own if k not in saved and not k.startswith(fresh))
    extra = sorted(k for k in saved if k not in own)
    bad = sorted(k for k in saved if k in own and saved[k].shape != own[k].shape)
    if missing or extra or bad:
        raise UserError(
            f"--init-from {directory}: weights do not fit this model (missing {missing[:3]}, "
            f"unexpected {extra[:3]}, other shapes {bad[:3]})"
        )
    nn.Module.load_state_dict(model, {**own, **saved})
    if grow_layer is not None:
        _identity_layer(model, grow_layer)
