"""The files of a saved model (config.json + model.safetensors) and `SavedModel`, which gives the predictors and the
pixel baseline their save_pretrained / from_pretrained; loading a saved predictor of either kind from its directory;
and the one reader of a JSON file in a weights folder that every stage's loader uses (one-line errors naming what is
missing)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

# "semworld_model" in config.json -> (module, class); the baseline is imported only when asked for.
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "four_tensor": ("models.four_tensor", "FourTensorModel"),
    "baseline": ("models.baseline", "BaselineModel"),
    "attentime_lm": ("models.attentime", "AttentimeLM"),
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


def save_model(model: nn.Module, directory: str | Path, kind: str) -> None:
    """config.json ({"semworld_model": kind, ...the config}) and model.safetensors of `model` into `directory`."""
    from safetensors.torch import save

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config = {"semworld_model": kind, **model.config.to_dict()}  # type: ignore[operator,union-attr]
    (out / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    # One metadata key: safetensors writes a metadata map in no fixed order, and the same weights must give the
    # same bytes (a resumed run's file equals an uninterrupted one's). Written as bytes, like config.json, so the
    # file takes the umask's mode (safetensors' save_file makes it owner-only, 0o600).
    (out / WEIGHTS_NAME).write_bytes(save(state, metadata={"semworld_model": kind}))


def load_model(
    cls: type[M], config_cls: Any, directory: str | Path, kind: str, map_location: str | torch.device = "cpu"
) -> M:
    """Rebuild a `cls` (built from a `config_cls.from_dict(config.json)`) from the files save_model wrote;
    a missing file is a FileNotFoundError, a wrong kind or shape a ValueError."""
    from safetensors.torch import load_file

    what = f"a saved semworld {kind} model ({CONFIG_NAME} + {WEIGHTS_NAME})"
    raw = read_json_file(directory, CONFIG_NAME, what)
    weights = find_file(directory, WEIGHTS_NAME, what)
    found = raw.get("semworld_model", kind)
    if found != kind:
        raise ValueError(f"{Path(directory) / CONFIG_NAME}: semworld_model is {found!r}, not {kind!r}")
    model = cls(config_cls.from_dict(raw))  # type: ignore[call-arg]
    try:
        model.load_state_dict(load_file(str(weights), device=str(map_location)))
    except RuntimeError as err:
        raise ValueError(
            f"{weights}: weights do not match {CONFIG_NAME}: {str(err).splitlines()[0]}"
        ) from None
    return model.to(map_location)


class SavedModel(nn.Module):
    """A model saved as config.json ({"semworld_model": kind, ...its config}) and model.safetensors, as diffusers'
    models are: `save_pretrained` writes the two files, `from_pretrained` rebuilds the model from them. A subclass
    names its `kind` and its `config_class` (whose `to_dict` / `from_dict` are what config.json holds)."""

    kind: ClassVar[str]
    config_class: ClassVar[Any]

    def save_pretrained(self, directory: str | Path) -> None:
        """Write config.json (with "semworld_model": this model's kind) and model.safetensors into `directory`."""
        save_model(self, directory, self.kind)

    @classmethod
    def from_pretrained(cls, directory: str | Path, map_location: str | torch.device = "cpu") -> Self:
        """Rebuild the model from config.json and model.safetensors in `directory` (see load_model)."""
        return load_model(cls, cls.config_class, directory, cls.kind, map_location)


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
