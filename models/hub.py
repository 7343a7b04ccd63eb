"""Loading a saved predictor of either kind from its directory (config.json + model.safetensors), and the one
reader of a JSON file in a weights folder that every stage's loader uses (one-line errors naming what is missing)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

# "semworld_model" in config.json -> (module, class); the baseline is imported only when asked for.
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "four_tensor": ("models.four_tensor", "FourTensorModel"),
    "baseline": ("models.baseline", "BaselineModel"),
}


def find_file(directory: str | Path, name: str, what: str) -> Path:
    """directory/name, or a FileNotFoundError saying whether the folder or the file is missing (and `what` the
    folder should hold)."""
    root = Path(directory)
    if not root.is_dir():
        problem = "not a directory" if root.exists() else "no such directory"
        raise FileNotFoundError(f"{root}: {problem}; expected {what}")
    path = root / name
    if not path.is_file():
        raise FileNotFoundError(f"{root}: no {name}; expected {what}")
    return path


def read_json_file(directory: str | Path, name: str, what: str) -> Any:
    """The parsed JSON of directory/name: FileNotFoundError (see find_file) or ValueError for bad JSON."""
    path = find_file(directory, name, what)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path.parent}: {name} is not valid JSON ({err})") from None


def predictor_kind(directory: str | Path) -> str:
    """The "semworld_model" of a saved predictor directory, with one-line errors for what is missing or wrong."""
    what = f"a saved semworld predictor ({CONFIG_NAME} + {WEIGHTS_NAME})"
    raw = read_json_file(directory, CONFIG_NAME, what)
    find_file(directory, WEIGHTS_NAME, what)
    cfg_path = Path(directory) / CONFIG_NAME
    kind = raw.get("semworld_model") if isinstance(raw, dict) else None
    if kind not in MODEL_KINDS:
        raise ValueError(f"{cfg_path}: semworld_model is {kind!r}; expected one of {sorted(MODEL_KINDS)}")
    return kind


def load_predictor(directory: str | Path, map_location: str | torch.device = "cpu") -> nn.Module:
    """Rebuild the saved predictor (4-tensor or baseline) in directory, dispatching on config.json."""
    module_name, class_name = MODEL_KINDS[predictor_kind(directory)]
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls.from_pretrained(directory, map_location=map_location)
