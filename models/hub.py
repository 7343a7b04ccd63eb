"""Loading a saved predictor of either kind from its directory (config.json + model.safetensors)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch
from torch import nn

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

# "semworld_model" in config.json -> (module, class); the baseline is imported only when asked for.
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "four_tensor": ("models.four_tensor", "FourTensorModel"),
    "baseline": ("models.baseline", "BaselineModel"),
}


def predictor_kind(directory: str | Path) -> str:
    """The "semworld_model" of a saved predictor directory, with one-line errors for what is missing or wrong."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such model directory")
    cfg_path = root / CONFIG_NAME
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{root}: no {CONFIG_NAME}; not a saved semworld predictor")
    if not (root / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(f"{root}: no {WEIGHTS_NAME} beside {CONFIG_NAME}")
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{cfg_path}: not valid JSON ({err.msg}, line {err.lineno})") from None
    kind = raw.get("semworld_model") if isinstance(raw, dict) else None
    if kind not in MODEL_KINDS:
        raise ValueError(f"{cfg_path}: semworld_model is {kind!r}; expected one of {sorted(MODEL_KINDS)}")
    return kind


def load_predictor(directory: str | Path, map_location: str | torch.device = "cpu") -> nn.Module:
    """Rebuild the saved predictor (4-tensor or baseline) in directory, dispatching on config.json."""
    module_name, class_name = MODEL_KINDS[predictor_kind(directory)]
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls.from_pretrained(directory, map_location=map_location)
