"""The stages of a batch clip (decode, caption, predict, render) and the one writer both engines share.

A clip's folder appears whole or not at all: its files are written by `pipeline.outputs.write_outputs` into a
scratch folder, its record `clip.json` last, and the scratch folder then takes the folder's place
(`pipeline.utils.atomic_dir`). A clip is complete when its `clip.json` is there with this run's fingerprint, so a
rerun (after a kill, or a Ray task retried) skips it, and writing it twice writes the same files.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pipeline.batch.jobs import BatchSettings, ClipJob
from pipeline.confidence import clip_warning, unsure_flags
from pipeline.domain import timeline
from pipeline.loading import is_plugin_stage
from pipeline.outputs import write_outputs
from pipeline.utils import (
    MODEL_INDEX,
    UserError,
    atomic_dir,
    atomic_write_json,
    atomic_write_text,
    default_weights_dir,
    read_model_index,
    stage_folder,
)
from pipeline.video import SampledClip, TooManyStatesError, VideoLimits, read_video
from pipeline.world_model import WorldModelOutput, WorldModelPipeline

logger = logging.getLogger(__name__)

RECORD_FILE = "clip.json"  # written last: its presence (with the right fingerprint) means the clip is done
STATES_FILE = "states.jsonl"
SUMMARY_FILE = "summary.json"

# notify(clip name, stage): which stage a clip is in, for a progress bar.
StageCallback = Callable[[str, str], None]


@dataclass
class ClipWork:
    """A clip on its way through the stages. Frames are (H, W, 3) uint8."""

    job: ClipJob
    frames: list[np.ndarray] = field(default_factory=list)  # sampled input frames
    indices: list[int] = field(default_factory=list)  # their frame numbers in the clip
    source_fps: float = 0.0
    state_rate: float = 1.0
    observed: list[str] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    rendered: list[np.ndarray] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # "stage: message" once a stage failed; later stages pass the clip on
    # As the pipeline reports them: per observed state the captioner's confidence and whether it parses in the
    # weights' domain; the pipeline's threshold; the clip's warning, if any (pipeline.confidence); per predicted
    # state whether it parses; per step what changed since the step before, in the domain's words.
    confidence: list[float | None] = field(default_factory=list)
    parses: list[bool | None] = field(default_factory=list)
    threshold: float | None = None
    warnings: list[str] = field(default_factory=list)
    predicted_parses: list[bool | None] = field(default_factory=list)
    changes: list[list[str]] = field(default_factory=list)
    domain: str | None = None
    # A predictor with actions: the action after each observed state, then each forecast step's, as it read them.
    actions: list[str | None] = field(default_factory=list)


@dataclass
class ClipResult:
    """What happened to one clip in a run: ok (written now), skipped (complete from an earlier run), failed."""

    name: str
    source: str
    status: str
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    observed: int = 0
    predicted: int = 0
    record: dict[str, Any] | None = None  # its states.jsonl line (ok and skipped)
    fingerprint: str | None = None  # of a failed clip: a rerun knows whether its input changed since

    def summary(self) -> dict[str, Any]:
        record = self.record or {}
        return {
            "name": self.name,
            "source": self.source,
            "status": self.status,
            "seconds": {k: round(v, 4) for k, v in self.timings.items()},
            "observed_states": self.observed,
            "predicted_states": self.predicted,
            "unsure_states": sum(record.get("unsure", [])),
            "warnings": list(record.get("warnings", [])),
            "error": self.error,
            **({"fingerprint": self.fingerprint} if self.fingerprint else {}),
        }


UNREADABLE = "decode: "  # a failure of the input itself: it fails again until the file changes


def still_broken(jobs: Sequence[ClipJob], settings: BatchSettings) -> list[ClipResult]:
    """The clips the last run in this folder could not read (a `decode` failure) whose file has not changed
    since (same fingerprint): failed again without loading a model to find out."""
    try:
        last = json.loads((settings.out / SUMMARY_FILE).read_text())
        before = {c["name"]: c for c in last.get("clips", []) if c.get("status") == "failed"}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []
    out = []
    for job in jobs:
        old = before.get(job.name, {})
        unreadable = str(old.get("error", "")).startswith(UNREADABLE)
        if unreadable and old.get("fingerprint") == job.fingerprint(settings):
            error = (f"{old['error']} (unchanged since the last run, so not read again: replace the file, or "
                     f"leave it out of IN to stop seeing it)")  # fmt: skip
            out.append(
                ClipResult(job.name, str(job.source), "failed", {}, error, fingerprint=old["fingerprint"])
            )
    return out


def _fail(work: ClipWork, stage: str, err: BaseException) -> None:
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    work.error = f"{stage}: {message}"
    logger.debug("%s failed at %s:\n%s", work.job.name, stage, "".join(traceback.format_exception(err)))


FACTORY_ENV = (
    "SEMWORLD_PIPELINE_FACTORY"  # 'module:function' returning a WorldModelPipeline (as the API reads it)
)


def load_pipeline(
    settings: BatchSettings, device: str | None = None, components: Sequence[str] | None = None
) -> WorldModelPipeline:
    """The components this run needs (or `components`), loaded once per worker from the weights folder, or from
    `$SEMWORLD_PIPELINE_FACTORY` (the API's hook for stand-in stages)."""
    factory = os.environ.get(FACTORY_ENV)
    if factory:
        module, _, func = factory.partition(":")
        pipe: WorldModelPipeline = getattr(importlib.import_module(module), func or "make_pipeline")()
        pipe.caption_batch_size = settings.caption_batch_size
        pipe.render_batch_size = settings.render_batch_size
        return pipe
    stages = tuple(components or settings.components)
    own = {stage: folder for stage, folder in settings.stage_folders.items() if stage in stages}
    return WorldModelPipeline.from_pretrained(
        settings.weights or default_weights_dir(),
        device=device or settings.device,
        dtype=settings.dtype,
        stage_devices=settings.stage_devices or None,
        stage_dtypes=settings.stage_dtypes or None,
        compile=settings.compile,
        stages=stages,
        project=settings.project,
        mirror=settings.mirror,
        caption_batch_size=settings.caption_batch_size,
        render_batch_size=settings.render_batch_size,
        **own,
    )


def check_weights(settings: BatchSettings) -> None:
    """Before any work: the weights folder has a model_index.json naming a folder for each component the run
    loads (a UserError otherwise, so that a run with bad --weights stops at once with exit code 2)."""
    if os.environ.get(FACTORY_ENV):
        return
    weights = settings.weights or default_weights_dir()
    index = read_model_index(weights)
    for component in settings.components:
        own = settings.stage_folders[component]
        if own is not None:
            if not own.is_dir():
                raise UserError(f"--{component} {own}: no such directory")
            continue
        if is_plugin_stage(index, component):
            continue  # a plug-in stage may need no folder: its factory says what it lacks
        folder = stage_folder(weights, index, component)
        if folder is None:
            raise UserError(f"{weights / MODEL_INDEX}: no '{component}' entry (needed by --stages)")
        if not folder.is_dir():
            raise UserError(f"{folder}: missing folder for the {component} named in {MODEL_INDEX}")


# ---- the stages --------------------------------------------------------------------------------------------
def decode(job: ClipJob, settings: BatchSettings) -> ClipWork:
    """Read and sample the clip within the run's limits (an unreadable or too long clip fails here)."""
    work = ClipWork(job)
    t = time.perf_counter()
    try:
        limits = VideoLimits(max_frames=settings.max_frames, max_duration_s=settings.max_duration_s)
        clip: SampledClip = read_video(
            job.source, stride=job.stride, state_rate=job.state_rate, limits=limits
        )
        n = job.context or len(clip.frames)  # --context: the first N sampled frames are the observed past
        work.frames, work.indices = clip.frames[:n], clip.indices[:n]
        work.source_fps, work.state_rate = clip.source_fps, clip.state_rate
    except TooManyStatesError as err:  # say which flags change it
        _fail(work, "decode", TooManyStatesError(f"{err} (--state-rate HZ or --stride K, or --max-frames N)"))
    except Exception as err:  # noqa: BLE001 - any problem with one clip is that clip's failure
        _fail(work, "decode", err)
    work.timings["decode"] = time.perf_counter() - t
    return work


def caption(pipe: WorldModelPipeline, works: Sequence[ClipWork]) -> None:
    """Caption the frames of every clip still going, in one stream of batches; each clip is charged its share
    of the time by frames."""
    live = [w for w in works if w.error is None]
    frames = [f for w in live for f in w.frames]
    if not frames:
        return
    t = time.perf_counter()
    try:
        scored = pipe.caption_scored(frames)
    except Exception as err:  # noqa: BLE001
        if len(live) == 1:
            _fail(live[0], "caption", err)
            return
        for w in live:  # one clip's frames broke the batch: find it by captioning clip by clip
            caption(pipe, [w])
        return
    seconds = time.perf_counter() - t
    start = 0
    for w in live:
        mine = scored[start : start + len(w.frames)]
        start += len(w.frames)
        w.observed = [text for text, _ in mine]
        w.confidence = [c for _, c in mine]
        w.parses = [pipe.parses(x) for x in w.observed]
        w.threshold = pipe.confidence_threshold
        w.changes, w.domain = timeline(pipe.domain, w.observed), pipe.domain.name
        warning = clip_warning(w.confidence, w.parses, pipe.confidence_threshold, pipe.domain)
        w.warnings = [warning] if warning else []
        w.timings["caption"] = seconds * len(w.frames) / len(frames)


def predict(pipe: WorldModelPipeline, works: Sequence[ClipWork]) -> None:
    """The next `horizon` states of every clip still going, as one batch of histories (a rollout to the
    longest horizon, cut per clip: the first k steps of a greedy rollout do not depend on how far it goes)."""
    live = [w for w in works if w.error is None]
    if not live:
        return
    k = max(w.job.horizon for w in live)
    t = time.perf_counter()
    try:
        # Captions of out-of-domain frames may run past the predictor's token slots: cut those (as predict does).
        # A line's actions steer its forecast (a predictor of states alone refuses them).
        histories = [list(w.observed) for w in live]
        rollouts, used = pipe.forecast_under(histories, k, [w.job.actions for w in live], truncate=True)
        if len(rollouts) != len(live) or any(len(r) != k for r in rollouts):
            raise RuntimeError(
                f"predictor returned {[len(r) for r in rollouts]} states for {len(live)} x {k}"
            )
    except Exception as err:  # noqa: BLE001
        if len(live) == 1:
            _fail(live[0], "predict", err)
            return
        for w in live:
            predict(pipe, [w])
        return
    seconds = time.perf_counter() - t
    for w, states, acts in zip(live, rollouts, used, strict=True):
        w.predicted = list(states[: w.job.horizon])
        w.actions = acts[: len(w.observed) + w.job.horizon - 1]
        w.predicted_parses = [pipe.parses(x) for x in w.predicted]
        w.changes = timeline(pipe.domain, [*w.observed, *w.predicted])
        w.timings["predict"] = seconds / len(live)


def render(pipe: WorldModelPipeline, work: ClipWork, settings: BatchSettings) -> None:
    """One frame per predicted state, seeded per clip (the same frames whatever clips share its batch)."""
    if work.error is not None:
        return
    t = time.perf_counter()
    try:
        generator = torch.Generator("cpu").manual_seed(work.job.seed)
        work.rendered = pipe.render(
            work.predicted, generator=generator, steps=settings.steps, guidance=settings.guidance
        )
    except Exception as err:  # noqa: BLE001
        _fail(work, "render", err)
    work.timings["render"] = time.perf_counter() - t


# ---- the writer ----------------------------------------------------------------------------------------------
def states_record(work: ClipWork) -> dict[str, Any]:
    """The clip's line of states.jsonl, in the format `semworld world generate` writes (so `semworld train
    predictor --data OUT/states.jsonl` reads it). A state the captioner was unsure of (pipeline.confidence) is
    flagged `unsure` and not `predictable`, so that scoring leaves it out; the clip's warning goes with it."""
    job = work.job
    doubtful = unsure_flags(work.confidence, work.parses, work.threshold, len(work.observed))
    return {
        "clip": str(job.source),
        "fps": work.source_fps,
        "stride": job.stride if job.state_rate is None else None,
        "states": list(work.observed),
        "predictable": [not u for u in doubtful],
        "unsure": doubtful,
        "warnings": list(work.warnings),
        "seed": job.seed,
        "id": job.name,
        "state_rate": work.state_rate,
        "frame_indices": list(work.indices),
        "predicted": list(work.predicted),
        **({"actions": list(work.actions)} if work.actions else {}),
    }


def write_clip(work: ClipWork, settings: BatchSettings) -> ClipResult:
    """Write a finished clip's folder atomically (or report its failure). Safe to call twice for one clip."""
    job = work.job
    if work.error is not None:
        return ClipResult(job.name, str(job.source), "failed", dict(work.timings), work.error,
                          fingerprint=job.fingerprint(settings))  # fmt: skip
    t = time.perf_counter()
    record = states_record(work)
    try:
        output = WorldModelOutput(
            observed_states=list(work.observed),
            predicted_states=list(work.predicted),
            observed_frames=list(work.frames),
            predicted_frames=list(work.rendered),
            state_rate=work.state_rate,
            source_indices=list(work.indices),
            observed_confidence=list(work.confidence),
            observed_parses=list(work.parses),
            predicted_parses=list(work.predicted_parses),
            confidence_threshold=work.threshold,
            warnings=list(work.warnings),
            changes=list(work.changes),
            domain=work.domain,
        )
        with atomic_dir(settings.out / job.name) as tmp:
            files = write_outputs(output, tmp)
            timings = {**work.timings, "write": time.perf_counter() - t}
            names = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("."))
            doc = {
                "name": job.name,
                "source": str(job.source),
                "fingerprint": job.fingerprint(settings),
                "stages": list(settings.stages),
                "params": job.params(),
                "timings": {k: round(v, 4) for k, v in timings.items()},
                "files": names,
                "record": record,
            }
            assert files.states.name in names  # the shared writer's files are what the record lists
            atomic_write_json(tmp / RECORD_FILE, doc)  # last: the clip counts as done from here on
    except Exception as err:  # noqa: BLE001 - a full disk or a bad frame fails this clip, not the run
        _fail(work, "write", err)
        return ClipResult(job.name, str(job.source), "failed", dict(work.timings), work.error,
                          fingerprint=job.fingerprint(settings))  # fmt: skip
    return ClipResult(
        job.name, str(job.source), "ok", timings, None, len(work.observed), len(work.predicted), record
    )


def is_complete(job: ClipJob, settings: BatchSettings) -> dict[str, Any] | None:
    """The stored record of a clip done earlier with the same fingerprint and all its files, else None."""
    folder = settings.out / job.name
    try:
        doc = json.loads((folder / RECORD_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("fingerprint") != job.fingerprint(settings):
        return None
    if not all((folder / name).is_file() for name in doc.get("files", [])):
        return None
    return doc


def skipped(job: ClipJob, doc: dict[str, Any]) -> ClipResult:
    record = doc["record"]
    return ClipResult(
        job.name,
        str(job.source),
        "skipped",
        {k: float(v) for k, v in doc.get("timings", {}).items()},
        None,
        len(record.get("states", [])),
        len(record.get("predicted", [])),
        record,
    )


def process(
    pipe: WorldModelPipeline, job: ClipJob, settings: BatchSettings, notify: StageCallback | None = None
) -> ClipResult:
    """All the run's stages on one clip, then its folder (the local engine's unit of work)."""
    say = notify or (lambda name, stage: None)
    say(job.name, "decode")
    work = decode(job, settings)
    for stage in settings.stages:
        if work.error is not None:
            break
        say(job.name, stage)
        if stage == "caption":
            caption(pipe, [work])
        elif stage == "predict":
            predict(pipe, [work])
        else:
            render(pipe, work, settings)
    say(job.name, "write")
    return write_clip(work, settings)


# ---- the run's files -------------------------------------------------------------------------------------------
def finish_run(
    jobs: Sequence[ClipJob], results: Sequence[ClipResult], settings: BatchSettings, extra: dict[str, Any]
) -> dict[str, Any]:
    """Write OUT/states.jsonl (one line per complete clip, in the order of the inputs) and OUT/summary.json
    (every clip: status, seconds per stage, error). Both are rebuilt whole, so a rerun after a kill leaves each
    clip in them exactly once. Returns the summary."""
    by_name = {r.name: r for r in results}
    ordered = [by_name[j.name] for j in jobs if j.name in by_name]
    lines = [json.dumps(r.record) + "\n" for r in ordered if r.record is not None]
    atomic_write_text(settings.out / STATES_FILE, "".join(lines))
    counts = {s: sum(r.status == s for r in ordered) for s in ("ok", "skipped", "failed")}
    summary = {
        **extra,
        "out": str(settings.out),
        "settings": settings.to_dict(),
        "clips_total": len(ordered),
        "counts": counts,
        "failed": [r.name for r in ordered if r.status == "failed"],
        "clips": [r.summary() for r in ordered],
    }
    atomic_write_json(settings.out / SUMMARY_FILE, summary)
    return summary
