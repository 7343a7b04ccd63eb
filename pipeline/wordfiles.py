"""Text files of states and actions in words, one per line: what `--states FILE` and `--actions FILE` read, and
the actions file a batch finds beside a clip (`pong_07.mp4` -> `pong_07.actions.txt`)."""

from __future__ import annotations

from pathlib import Path

from pipeline.utils import UserError

ACTIONS_SUFFIX = ".actions.txt"


def _lines(path: Path, label: str, what: str) -> list[str]:
    """The non-empty lines of `path` (lines starting with '#' are comments); one line of error naming `label`
    (the flag or the file's role) when it is missing or holds none of `what`."""
    if not path.is_file():
        raise UserError(f"{label} {path}: no such file")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [s for s in lines if s and not s.startswith("#")]
    if not lines:
        raise UserError(f"{label} {path}: no {what}s in the file (write one {what} per line)")
    return lines


def read_states_file(path: Path, label: str = "--states") -> list[str]:
    """One state per non-empty line; lines starting with '#' are comments."""
    return _lines(path, label, "state")


def read_actions_file(path: Path, label: str = "--actions") -> list[str | None]:
    """One action word per non-empty line ('?': unknown, None); lines starting with '#' are comments."""
    words = _lines(path, label, "action")
    bad = [w for w in words if len(w.split()) != 1]
    if bad:
        raise UserError(f"{label} {path}: {bad[0]!r} is not one word (one action per line)")
    return [None if w == "?" else w for w in words]


def actions_beside(clip: Path) -> Path | None:
    """The actions file beside a clip (its name with ACTIONS_SUFFIX for the video suffix), if there is one."""
    path = clip.with_name(clip.stem + ACTIONS_SUFFIX)
    return path if path.is_file() else None
