"""What a batch run is asked to do: its settings, and the list of clips (from folders, globs or manifests), each
with its own parameters and an output folder name that no other clip of the run can share."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.params import check_params
from pipeline.utils import UserError
from pipeline.wordfiles import actions_beside, read_actions_file

logger = logging.getLogger(__name__)

# The stages a run may do, in order; each needs the ones before it (a render needs predicted states).
STAGE_NAMES = ("caption", "predict", "render")
# The world model's name for the component each stage runs (model_index.json keys).
COMPONENTS = {"caption": "captioner", "predict": "predictor", "render": "renderer"}
VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mpg", ".mpeg", ".gif"})
MANIFEST_SUFFIXES = frozenset({".txt", ".list", ".jsonl"})
# Names a clip folder may not take: the run's own files, and the suffixes of scratch folders (utils.atomic_dir).
RESERVED_NAMES = frozenset({"states.jsonl", "summary.json"})
RESERVED_SUFFIXES = (".tmp", ".old")
PER_CLIP_KEYS = ("horizon", "stride", "state_rate", "context", "seed")


def parse_stages(text: str) -> tuple[str, ...]:
    """ "caption,predict" -> ("caption", "predict"). The stages must start at caption and follow in order."""
    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in stages if s not in STAGE_NAMES]
    if unknown:
        raise UserError(
            f"--stages {text}: unknown stage {unknown[0]!r} (choose from {', '.join(STAGE_NAMES)})"
        )
    if not stages or stages != STAGE_NAMES[: len(stages)]:
        raise UserError(
            f"--stages {text}: give the first stages in order: caption | caption,predict | caption,predict,render"
        )
    return stages


@dataclass(frozen=True)
class BatchSettings:
    """How every clip of a run is processed (a manifest line may override the per-clip ones).

    Args:
        out: the output folder (one folder per clip inside, plus states.jsonl and summary.json).
        stages: the first stages of caption -> predict -> render to run.
        horizon / stride / state_rate / context / seed: defaults for each clip (as in `semworld predict`).
        steps / guidance: renderer sampling overrides (None: the renderer's own).
        max_frames / max_duration_s: limits of a clip; a longer clip fails alone.
        weights: weights folder with model_index.json (None: the shipped weights/).
        device: torch device spec (None: cuda if available).
        caption_batch_size / render_batch_size: frames per forward pass of those stages.
        captioner / predictor / renderer: a stage's own folder instead of the one model_index.json names.
        dtype / stage_devices / stage_dtypes / compile: the placement, as `semworld predict` takes it
            (pipeline.placement.resolve_placement).
        project / mirror: projection onto the domain's valid states, mirror averaging (as in `predict`).
    """

    out: Path
    stages: tuple[str, ...] = STAGE_NAMES
    horizon: int = 8
    stride: int | None = None
    state_rate: float | None = None
    context: int | None = None
    seed: int = 0
    steps: int | None = None
    guidance: float | None = None
    max_frames: int = 64
    max_duration_s: float = 120.0
    weights: Path | None = None
    device: str | None = None
    caption_batch_size: int = 16
    render_batch_size: int = 8
    captioner: Path | None = None
    predictor: Path | None = None
    renderer: Path | None = None
    dtype: str | None = None
    stage_devices: tuple[str, ...] = ()
    stage_dtypes: tuple[str, ...] = ()
    compile: bool = False
    project: bool = True
    mirror: bool = False

    def __post_init__(self) -> None:
        if not self.stages or self.stages != STAGE_NAMES[: len(self.stages)]:
            raise ValueError(f"stages must be the first of {STAGE_NAMES} in order, got {self.stages}")
        check_params(horizon=self.horizon, stride=self.stride, state_rate=self.state_rate, context=self.context,
                     seed=self.seed, steps=self.steps, guidance=self.guidance)  # fmt: skip
        if self.max_frames < 1 or not self.max_duration_s > 0:
            raise ValueError(
                f"max_frames must be >= 1 and max_duration_s > 0, got {self.max_frames}, {self.max_duration_s}"
            )
        if self.caption_batch_size < 1 or self.render_batch_size < 1:
            raise ValueError("batch sizes must be >= 1")

    @property
    def components(self) -> tuple[str, ...]:
        """The model_index.json components this run loads."""
        return tuple(COMPONENTS[s] for s in self.stages)

    @property
    def stage_folders(self) -> dict[str, Path | None]:
        """The stages given a folder of their own (--captioner/--predictor/--renderer), by stage."""
        return {"captioner": self.captioner, "predictor": self.predictor, "renderer": self.renderer}

    def model_options(self) -> dict[str, Any]:
        """What decides the models' outputs beyond the weights folder, when not the default (in fingerprints)."""
        opts = {"stage_folders": {k: str(v.resolve()) for k, v in self.stage_folders.items() if v is not None},
                "dtype": self.dtype, "stage_dtypes": list(self.stage_dtypes), "mirror": self.mirror,
                "project": None if self.project else False}  # fmt: skip
        return {k: v for k, v in opts.items() if v not in (None, False, [], {})}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("out", "weights", "captioner", "predictor", "renderer"):
            d[key] = None if d[key] is None else str(d[key])
        for key in ("stages", "stage_devices", "stage_dtypes"):
            d[key] = list(d[key])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchSettings:
        d = dict(d)
        for key in ("out", "weights", "captioner", "predictor", "renderer"):
            d[key] = None if d.get(key) is None else Path(d[key])
        for key in ("stages", "stage_devices", "stage_dtypes"):
            d[key] = tuple(d.get(key, ()))
        return cls(**d)


@dataclass(frozen=True)
class ClipJob:
    """One clip to process: where it is, the folder its outputs go to (under the run's out), its parameters."""

    name: str
    source: Path  # absolute
    horizon: int
    stride: int | None
    state_rate: float | None
    context: int | None
    seed: int
    root: Path = field(default=Path("."), compare=False)  # what `name` was made relative to
    # A manifest line's actions (a predictor with actions): after each observed state, then each forecast step.
    actions: tuple[str | None, ...] | None = None

    def params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PER_CLIP_KEYS}

    def fingerprint(self, settings: BatchSettings) -> str:
        """A hash of everything that decides this clip's outputs: a clip whose stored record has another
        fingerprint (other input bytes size, other parameters, stages or weights) is done again."""
        try:
            size = self.source.stat().st_size
        except OSError:
            size = -1
        key = {
            "source": str(self.source),
            "size": size,
            **self.params(),
            **({"actions": list(self.actions)} if self.actions is not None else {}),
            "stages": list(settings.stages),
            "steps": settings.steps,
            "guidance": settings.guidance,
            "max_frames": settings.max_frames,
            "max_duration_s": settings.max_duration_s,
            "weights": None if settings.weights is None else str(settings.weights.resolve()),
            **settings.model_options(),
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def to_row(self) -> dict[str, Any]:
        """Plain values only (for Ray Data rows)."""
        row = {"name": self.name, "source": str(self.source), "root": str(self.root), **self.params()}
        # (actions as one JSON string: a column of ragged lists with nulls is not a plain value everywhere)
        return row | ({"actions": json.dumps(list(self.actions))} if self.actions is not None else {})

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ClipJob:
        def opt(v: Any, kind: type) -> Any:
            return None if v is None or v != v else kind(v)  # v != v: NaN, how a missing float may come back

        return cls(
            name=str(row["name"]),
            source=Path(str(row["source"])),
            horizon=int(row["horizon"]),
            stride=opt(row.get("stride"), int),
            state_rate=opt(row.get("state_rate"), float),
            context=opt(row.get("context"), int),
            seed=int(row["seed"]),
            root=Path(str(row.get("root", "."))),
            actions=tuple(json.loads(row["actions"])) if isinstance(row.get("actions"), str) else None,
        )


# ---- finding the clips -------------------------------------------------------------------------------------
def _glob_root(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard ("data/*/x*.mp4" -> data)."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _scan_folder(folder: Path, pattern: str | None, recursive: bool) -> list[Path]:
    found = folder.rglob(pattern or "*") if recursive else folder.glob(pattern or "*")
    files = [
        p
        for p in found
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]
    if pattern is None:  # without a pattern, the usual video files; a pattern takes whatever it matches
        files = [p for p in files if p.suffix.lower() in VIDEO_SUFFIXES]
    return sorted(files)


def _read_manifest(path: Path, settings: BatchSettings) -> list[tuple[Path, dict[str, Any]]]:
    """Paths (relative ones are relative to the manifest's folder) with per-clip overrides from JSONL lines."""
    out: list[tuple[Path, dict[str, Any]]] = []
    text = path.read_text(encoding="utf-8")
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{lineno}: "
        overrides: dict[str, Any] = {}
        if path.suffix == ".jsonl":
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{where}not valid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
                raise UserError(f'{where}expected a JSON object with a "path" string')
            extra = sorted(set(rec) - {"path", "actions", *PER_CLIP_KEYS})
            if extra:
                known = ", ".join(["path", *PER_CLIP_KEYS, "actions"])
                raise UserError(f"{where}unknown key {extra[0]!r} (known: {known})")
            overrides = {k: rec[k] for k in (*PER_CLIP_KEYS, "actions") if k in rec}
            line = rec["path"]
        clip = Path(line).expanduser()
        out.append((clip if clip.is_absolute() else path.parent / clip, overrides | {"_where": where}))
    return out


def _job(source: Path, root: Path, settings: BatchSettings, overrides: dict[str, Any]) -> ClipJob:
    where = overrides.pop("_where", "")
    actions = overrides.pop("actions", None)
    beside = actions_beside(source) if actions is None else None
    if beside is not None:  # a game clip with its actions file beside it
        actions = read_actions_file(beside, "actions file")
    if actions is not None and (
        not isinstance(actions, list)
        or not all(a is None or (isinstance(a, str) and a.strip()) for a in actions)
    ):
        raise UserError(f'{where}"actions" must be a list of action words (null: unknown)')
    params = {k: getattr(settings, k) for k in PER_CLIP_KEYS}
    # A line's own sampling replaces the run's (its stride wins over the run's --state-rate, and back).
    if "stride" in overrides:
        params["state_rate"] = None
    if "state_rate" in overrides:
        params["stride"] = None
    params.update(overrides)
    try:
        check_params(where, **params)
    except ValueError as err:
        raise UserError(str(err)) from None
    return ClipJob(name="", source=source.resolve(), root=root.resolve(), **params,
                   actions=None if actions is None else tuple(actions))  # fmt: skip


def collect_jobs(
    inputs: list[str], settings: BatchSettings, pattern: str | None = None, recursive: bool = False
) -> list[ClipJob]:
    """Every clip named by `inputs` (folders, globs, video files, manifests), in order, without repeats,
    each with its output folder name. Nothing is read but names; a bad clip fails later, alone."""
    jobs: list[ClipJob] = []
    for text in inputs:
        path = Path(text).expanduser()
        if path.is_dir():
            files = _scan_folder(path, pattern, recursive)
            if not files:
                what = (
                    f"matching {pattern!r}"
                    if pattern
                    else f"with a video suffix ({', '.join(sorted(VIDEO_SUFFIXES))})"
                )
                logger.warning(
                    "%s: no files %s%s", path, what, "" if recursive else " (--recursive looks deeper)"
                )
            jobs += [_job(f, path, settings, {}) for f in files]
        elif path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES:
            entries = _read_manifest(path, settings)
            jobs += [_job(f, path.parent, settings, o) for f, o in entries]
        elif path.is_file():
            jobs.append(_job(path, path.parent, settings, {}))
        elif glob.has_magic(text):
            files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not files:
                logger.warning("%s: the glob matches no file", text)
            jobs += [_job(f, _glob_root(text), settings, {}) for f in files]
        else:
            raise UserError(f"{text}: no such file, folder or glob match")
    # The same clip with the same parameters twice is one job (the same clip at two horizons is two).
    unique: dict[tuple[str, str], ClipJob] = {}
    for job in jobs:
        key = (str(job.source), json.dumps(job.params(), sort_keys=True))
        if key in unique:
            logger.info("%s: listed twice with the same parameters; done once", job.source)
        unique.setdefault(key, job)
    return assign_names(list(unique.values()))


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _candidate(job: ClipJob) -> str:
    """The clip's path under its root, without the suffix, folders joined by "__", odd characters as "_"."""
    try:
        rel = job.source.relative_to(job.root)
    except ValueError:
        rel = Path(job.source.name)
    parts = [*rel.parent.parts, rel.stem] if rel.parent != Path(".") else [rel.stem]
    name = "__".join(_UNSAFE.sub("_", p) for p in parts).lstrip(".")
    return name or "clip"


def assign_names(jobs: list[ClipJob]) -> list[ClipJob]:
    """Give each job a folder name: its readable candidate when no other job has it (compared without case, as
    macOS and Windows file systems do), else the candidate plus a short hash of the path and parameters."""

    def hashed(job: ClipJob, cand: str) -> str:
        key = json.dumps([str(job.source), job.params()], sort_keys=True)
        return f"{cand}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"

    cands = [_candidate(j) for j in jobs]
    counts = Counter(c.lower() for c in cands)
    names = [
        hashed(j, c)
        if counts[c.lower()] > 1 or c.lower() in RESERVED_NAMES or c.lower().endswith(RESERVED_SUFFIXES)
        else c
        for j, c in zip(jobs, cands, strict=True)
    ]
    # A readable name can equal another clip's hashed one only by a freak; make sure, not hopeful.
    seen: set[str] = set()
    for i, (job, name) in enumerate(zip(jobs, names, strict=True)):
        while name.lower() in seen:
            name = hashed(job, name)
        seen.add(name.lower())
        names[i] = name
    return [replace(j, name=n) for j, n in zip(jobs, names, strict=True)]
