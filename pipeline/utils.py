"""The helpers every part of semworld shares, one copy each: the user's error, atomic writes, device and dtype
choice, the default weights folder, the `model_index.json` reader, and the canonical spelling of a state."""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch

from models import hub

REPO_ROOT = Path(__file__).resolve().parents[1]
WEIGHTS_ENV = "SEMWORLD_WEIGHTS_DIR"
MODEL_INDEX = "model_index.json"
STAGES = ("captioner", "predictor", "renderer")


class UserError(ValueError):
    """Bad input (a path, an argument, a file's contents) described in one short sentence: the CLI prints it as
    one line and exits 2, the API answers it with a 4xx."""


# ---- atomic writes ---------------------------------------------------------------------------------------
def _atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """The one atomic writer: `write(fh)` fills a new temporary file beside `path`, which is flushed to disk and
    then renamed over `path`, so a reader (or a crash) sees the old file or the whole new one, never half of it.
    The file is created with mode 0o666 less the umask, as `open(path, "w")` would make it (0o644 under the
    usual umask 022), not mkstemp's owner-only 0o600: outputs stay readable by whoever may read the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # another writer's temporary file of the same name: draw again
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())  # durable before the rename makes it visible (job results survive a crash)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically (a temporary file beside it, renamed over it once whole)."""
    _atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload: Any) -> None:
    """`payload` as indented JSON with a final newline, written atomically."""
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")


def atomic_torch_save(obj: object, path: str | Path) -> None:
    """torch.save written atomically, like every other file (a checkpoint is never half written)."""
    _atomic_write(path, lambda fh: torch.save(obj, fh))


def _umask_modes(root: Path) -> None:
    """Give every file under `root` the mode a new file takes here (0o666 less the umask): libraries that save
    through their own temporary files (safetensors' save_file, under transformers' and diffusers'
    save_pretrained) leave them owner-only, 0o600. The mode is read from a probe file, since os.umask can only
    be read by changing it, which would race with other threads creating files."""
    probe = root / f".mode.{secrets.token_hex(4)}"
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    mode = probe.stat().st_mode & 0o777
    probe.unlink()
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.stat(path).st_mode & 0o777 != mode:
                os.chmod(path, mode)


@contextmanager
def atomic_dir(directory: str | Path) -> Iterator[Path]:
    """Yield an empty scratch folder beside `directory`; when the block ends without an error the scratch folder
    takes the place of `directory` (the old one is moved aside, then removed), its files given the umask's mode."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    yield tmp
    _umask_modes(tmp)
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(tmp, directory)
    shutil.rmtree(old, ignore_errors=True)


# ---- the libraries' own output ----------------------------------------------------------------------------
# Loggers of the Hugging Face libraries whose import-time notes do not concern a user: transformers says once
# that an image processor falls back to PIL without torchvision (semworld uses the PIL processors on purpose).
_CHATTY_LOGGERS = ("transformers.utils.import_utils",)


@contextmanager
def quiet_loading(diffusers: bool = False) -> Iterator[None]:
    """Load or save Hugging Face models without the libraries' bars ("Loading weights", "Writing model shards",
    and with `diffusers` "Loading pipeline components") and import-time notes; errors still raise, and warnings
    about the model itself still log. The bars' settings are restored afterwards."""
    import transformers.utils.logging as hf_logging

    libraries: list[Any] = [hf_logging]
    if diffusers:
        import diffusers.utils.logging as diffusers_logging

        libraries.append(diffusers_logging)
    loggers = [logging.getLogger(name) for name in _CHATTY_LOGGERS]
    levels = [lg.level for lg in loggers]
    bars = [lib.is_progress_bar_enabled() for lib in libraries]
    for lib in libraries:
        lib.disable_progress_bar()
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        for lib, enabled in zip(libraries, bars, strict=True):
            if enabled:
                lib.enable_progress_bar()


# ---- devices ---------------------------------------------------------------------------------------------
def resolve_device(spec: str | torch.device | None = "auto", local_rank: int = 0) -> torch.device:
    """None or "auto" -> cuda (this process's local rank) when available, else cpu; otherwise the named device.
    A device this machine lacks is a UserError."""
    if spec is None or spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise UserError(f"--device {spec!r}: {err}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {spec}: CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def default_dtype(device: torch.device) -> torch.dtype:
    """The inference dtype of the Hugging Face stages: bfloat16 on CUDA where supported (float16 otherwise),
    float32 on every other device."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


# ---- the weights folder ------------------------------------------------------------------------------------
def default_weights_dir() -> Path:
    """`$SEMWORLD_WEIGHTS_DIR`, else the repository's shipped `weights/`."""
    env = os.environ.get(WEIGHTS_ENV)
    return Path(env) if env else REPO_ROOT / "weights"


def user_file(directory: str | Path, name: str, what: str, label: str = "") -> Path:
    """directory/name, or a one-line UserError ("<label> <directory>: no such directory; expected <what>")."""
    try:
        return hub.find_file(directory, name, what)
    except FileNotFoundError as err:
        raise UserError(f"{label} {err}".strip()) from None


def read_user_json(directory: str | Path, name: str, what: str, label: str = "") -> Any:
    """The parsed JSON of directory/name; a missing folder or file, or bad JSON, is a one-line UserError."""
    try:
        return hub.read_json_file(directory, name, what)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(f"{label} {err}".strip()) from None


def read_model_index(weights_dir: str | Path) -> dict[str, Any]:
    """The JSON object of `weights_dir/model_index.json`; a missing folder or index, or bad JSON, is a UserError."""
    what = f"a weights folder whose {MODEL_INDEX} names its {', '.join(STAGES)} folders"
    index = read_user_json(weights_dir, MODEL_INDEX, what, "weights")
    if not isinstance(index, dict):
        raise UserError(f"{Path(weights_dir) / MODEL_INDEX}: expected a JSON object naming the stage folders")
    return index


def stage_folder(weights_dir: str | Path, index: dict[str, Any], stage: str) -> Path | None:
    """The folder of `stage` that `index` names: a folder name, or a diffusers-style [library, class] pair whose
    folder is the stage's own name. None when the index has no entry for it."""
    entry = index.get(stage)
    if entry is None:
        return None
    return Path(weights_dir) / (entry if isinstance(entry, str) else stage)


# ---- states ----------------------------------------------------------------------------------------------
def canonical_state(text: str) -> str:
    """A state as the predictor's word-level tokenizer reads it: lowercase words and punctuation marks joined by
    single spaces (the shapes domain's canonical spelling too).

    "Red ball top left, lamp on." -> "red ball top left , lamp on ." (the split the word-level tokenizer makes:
    whitespace, then every punctuation mark alone), so that states compare as plain strings.
    """
    return " ".join(word for word, _ in _state_splitter().pre_tokenize_str(text.lower()))


@functools.cache
def _state_splitter() -> Any:  # tokenizers.pre_tokenizers.PreTokenizer
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
    )
