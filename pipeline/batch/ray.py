"""The Ray Data engine: the same stages as the local engine, as a streaming Ray Data pipeline.

    paths -> decode (CPU) -> caption -> predict -> render (map_batches, one callable class per model: the model
    loads once per actor; concurrency, num_gpus, num_cpus and batch_size set per stage) -> write (CPU)

Every stage is a callable class in an actor pool, the CPU ones too: a plain Ray task runs in a pooled worker
process that Ray ends after a second idle whenever the node runs more workers than it has CPUs (here: always,
the three model actors), so each decode or write task after a pause started a new Python process and imported
torch again. A row is one clip; the write stage calls the local engine's writer (pipeline.batch.clip.write_clip),
which is atomic and idempotent, so a call that Ray retries writes the same folder again. Ray is optional:
nothing here imports it until a run starts.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from pipeline.batch import clip as stages
from pipeline.batch.clip import ClipResult, ClipWork
from pipeline.batch.jobs import BatchSettings, ClipJob
from pipeline.utils import UserError

logger = logging.getLogger(__name__)

RAY_STAGES = ("decode", "caption", "predict", "render", "write")
STAGE_KEYS = ("concurrency", "num_gpus", "num_cpus", "batch_size")
INSTALL_HINT = "--ray needs Ray Data, an optional extra: pip install 'semworld[distributed]'"

Batch = dict[str, np.ndarray]  # a Ray Data batch in numpy format: column -> (B, ...) array


def require_ray() -> None:
    """Raise a one-line UserError saying how to install Ray when it is not there."""
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError:
        raise UserError(INSTALL_HINT) from None


@dataclass(frozen=True)
class StageResources:
    """What one stage asks Ray for: `concurrency` actors (replicas; None: a pool that grows from one actor as far
    as the cluster's free CPUs allow), each holding `num_gpus` (a share: 0.5 puts two replicas on one GPU) and
    `num_cpus` (which also sets the actor's torch threads: floored, at least one), fed `batch_size` clips per
    call (the CPU stages, decode and write, take one clip per call)."""

    concurrency: int | None = 1
    num_gpus: float = 0.0
    num_cpus: float = 1.0
    batch_size: int = 4

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.num_gpus < 0 or self.num_cpus < 0:
            raise ValueError(f"num_gpus and num_cpus must be >= 0, got {self.num_gpus}, {self.num_cpus}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


def stage_resources(
    settings: BatchSettings, overrides: dict[str, dict[str, Any]], cluster_gpus: float = 0.0
) -> dict[str, StageResources]:
    """Defaults per stage, then the user's `--ray-stage` values.

    The model stages use GPUs when `--device` says cuda, or says nothing and the cluster has GPUs. Their default
    shares add up to one GPU (renderer 0.5, captioner 0.25, predictor 0.25), so that the three stages all start on
    a one-GPU machine; more GPUs are used by raising `concurrency` / `num_gpus` per stage. Without GPUs the three
    model actors take half a CPU each and one decode and one write actor a quarter each, so that all five fit on
    two cores at once instead of waiting for each other; with GPUs the decode and write pools grow with the
    cluster's CPUs.

    Every model stage takes the same `batch_size` by default. A stage bundles its input blocks up to its batch
    size and returns one block per bundle, so a larger batch downstream (say 16 for the predictor) merges the
    blocks for good: the stages after it then get 16 clips per task, the first clips wait for the sixteenth, and
    one write task writes all sixteen in a row while the other core idles.
    """
    device = settings.device or ""
    gpu = device.startswith("cuda") or (settings.device in (None, "auto") and cluster_gpus > 0)
    share = {"caption": 0.25, "predict": 0.25, "render": 0.5} if gpu else dict.fromkeys(MODEL_STAGES, 0.0)
    cpus = 1.0 if gpu else 0.5
    io = None if gpu else 1  # decode and write actors
    res = {
        "decode": StageResources(concurrency=io, num_cpus=cpus / 2, batch_size=1),
        "caption": StageResources(num_gpus=share["caption"], num_cpus=cpus, batch_size=4),
        "predict": StageResources(num_gpus=share["predict"], num_cpus=cpus, batch_size=4),
        "render": StageResources(num_gpus=share["render"], num_cpus=cpus, batch_size=4),
        "write": StageResources(concurrency=io, num_cpus=cpus / 2, batch_size=1),
    }
    unknown = sorted(set(overrides) - set(RAY_STAGES))
    if unknown:
        raise UserError(f"--ray-stage {unknown[0]}: unknown stage (choose from {', '.join(RAY_STAGES)})")
    try:
        for stage, values in overrides.items():
            res[stage] = replace(res[stage], **values)
    except (TypeError, ValueError) as err:
        raise UserError(f"--ray-stage: {err}") from None
    return res


# ---- rows <-> clips in flight -------------------------------------------------------------------------------
_EMPTY_FRAMES = np.zeros((0, 1, 1, 3), dtype=np.uint8)


def _frames(frames: Sequence[np.ndarray]) -> np.ndarray:
    return np.stack(frames) if len(frames) else _EMPTY_FRAMES  # (F, H, W, 3)


def work_to_row(work: ClipWork) -> dict[str, Any]:
    return {
        **work.job.to_row(),
        "frames": _frames(work.frames),
        "indices": np.asarray(work.indices, dtype=np.int64),
        "source_fps": float(work.source_fps),
        "rate": float(work.state_rate),
        "observed": json.dumps(work.observed),
        "predicted": json.dumps(work.predicted),
        "rendered": _frames(work.rendered),
        "timings": json.dumps(work.timings),
        "error": work.error or "",
        "scores": json.dumps(
            {
                "confidence": work.confidence,
                "parses": work.parses,
                "threshold": work.threshold,
                "warnings": work.warnings,
                "predicted_parses": work.predicted_parses,
                "changes": work.changes,
                "domain": work.domain,
            }
        ),
    }


def row_to_work(row: dict[str, Any]) -> ClipWork:
    return ClipWork(
        job=ClipJob.from_row(row),
        frames=list(np.asarray(row["frames"], dtype=np.uint8)),
        indices=[int(i) for i in np.asarray(row["indices"])],
        source_fps=float(row["source_fps"]),
        state_rate=float(row["rate"]),
        observed=list(json.loads(str(row["observed"]))),
        predicted=list(json.loads(str(row["predicted"]))),
        rendered=list(np.asarray(row["rendered"], dtype=np.uint8)),
        timings=dict(json.loads(str(row["timings"]))),
        error=str(row["error"]) or None,
        **json.loads(str(row["scores"])),
    )


def _column(values: list[Any]) -> np.ndarray:
    if values and all(isinstance(v, np.ndarray) for v in values):
        if all(v.shape == values[0].shape for v in values):
            return np.stack(values)
        col = np.empty(len(values), dtype=object)  # clips of different sizes: one array per row
        for i, v in enumerate(values):
            col[i] = v
        return col
    if any(v is None for v in values):
        return np.array(values, dtype=object)
    return np.array(values)


def batch_to_works(batch: Batch) -> list[ClipWork]:
    n = len(next(iter(batch.values())))
    return [row_to_work({k: v[i] for k, v in batch.items()}) for i in range(n)]


def works_to_batch(works: list[ClipWork]) -> Batch:
    rows = [work_to_row(w) for w in works]
    return {k: _column([r[k] for r in rows]) for k in rows[0]}


# ---- the stages: one callable class each, so that each actor imports and loads once -------------------------------
def actor_threads() -> int:
    """Torch threads for this actor: the CPUs Ray gave it, floored, at least one (Ray's own rule for
    OMP_NUM_THREADS, which it applies only when the variable is unset; a driver started with
    OMP_NUM_THREADS=2 would otherwise give each of the three model actors two threads on two cores)."""
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    return max(1, math.floor(cpus))


class _ClipStage:
    """A CPU stage: one clip (row) per call, in an actor that imports the pipeline once."""

    def __init__(self, settings: dict[str, Any]) -> None:
        torch.set_num_threads(actor_threads())
        self.settings = BatchSettings.from_dict(settings)


class DecodeStage(_ClipStage):
    """Reads and samples one clip per call."""

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        return work_to_row(stages.decode(ClipJob.from_row(row), self.settings))


class WriteStage(_ClipStage):
    """Writes one finished clip's folder per call; the row out is its ClipResult as JSON."""

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        result = stages.write_clip(row_to_work(row), self.settings)
        return {"result": json.dumps(asdict(result))}


class _ModelStage:
    """Loads one component once per actor; each call runs it on a batch of clips."""

    component = ""

    def __init__(self, settings: dict[str, Any]) -> None:
        torch.set_num_threads(actor_threads())
        self.settings = BatchSettings.from_dict(settings)
        self.pipe = stages.load_pipeline(self.settings, components=(self.component,))

    def __call__(self, batch: Batch) -> Batch:
        works = batch_to_works(batch)
        self.run(works)
        return works_to_batch(works)

    def run(self, works: list[ClipWork]) -> None:
        raise NotImplementedError


class CaptionStage(_ModelStage):
    component = "captioner"

    def run(self, works: list[ClipWork]) -> None:
        stages.caption(self.pipe, works)  # every frame of the batch's clips in one stream of batches


class PredictStage(_ModelStage):
    component = "predictor"

    def run(self, works: list[ClipWork]) -> None:
        stages.predict(self.pipe, works)  # the batch's histories as one batch


class RenderStage(_ModelStage):
    component = "renderer"

    def run(self, works: list[ClipWork]) -> None:
        for w in works:  # seeded per clip, so a clip's frames do not depend on its batch mates
            stages.render(self.pipe, w, self.settings)


MODEL_STAGES: dict[str, type[_ModelStage]] = {
    "caption": CaptionStage,
    "predict": PredictStage,
    "render": RenderStage,
}


def build_dataset(jobs: Sequence[ClipJob], settings: BatchSettings, res: dict[str, StageResources]) -> Any:
    """The lazy Ray Dataset of the run: one output row {"result": ClipResult as JSON} per clip."""
    import ray.data
    from ray.data import ActorPoolStrategy

    def pool(r: StageResources) -> ActorPoolStrategy:
        return ActorPoolStrategy(size=r.concurrency) if r.concurrency else ActorPoolStrategy(min_size=1)

    sd = settings.to_dict()
    # One clip per block (up to 256 clips): a block is what a stage hands on, so clips stream one by one.
    ds: Any = ray.data.from_items([j.to_row() for j in jobs], override_num_blocks=max(1, min(len(jobs), 256)))
    ds = ds.map(
        DecodeStage, fn_constructor_kwargs={"settings": sd}, num_cpus=res["decode"].num_cpus,
        compute=pool(res["decode"]),
    )  # fmt: skip
    for stage in settings.stages:
        r = res[stage]
        ds = ds.map_batches(
            MODEL_STAGES[stage],
            fn_constructor_kwargs={"settings": sd},
            batch_size=r.batch_size,
            batch_format="numpy",
            num_cpus=r.num_cpus,
            num_gpus=r.num_gpus,
            compute=pool(r),
        )
    return ds.map(
        WriteStage, fn_constructor_kwargs={"settings": sd}, num_cpus=res["write"].num_cpus,
        compute=pool(res["write"]),
    )  # fmt: skip


def run_ray(
    jobs: Sequence[ClipJob],
    settings: BatchSettings,
    *,
    address: str | None = None,
    stages: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
    on_result: Callable[[ClipResult], None] | None = None,
) -> list[ClipResult]:
    """Run `jobs` on Ray Data: the Ray instance already initialised in this process, else the cluster at
    `address`, else a new local one (shut down at the end)."""
    require_ray()
    import ray

    results: list[ClipResult] = []
    if not jobs:
        return results
    stage_resources(settings, stages or {})  # bad --ray-stage values stop the run before Ray starts
    started_here = not ray.is_initialized()
    if started_here and address:
        ray.init(address=address)  # a running cluster (or Ray Client with ray://): its own settings
    elif started_here:
        ray.init(log_to_driver=False, include_dashboard=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # one bar, ours, over clips
    bar = tqdm(total=len(jobs), desc="batch (ray)", unit="clip", disable=not progress, dynamic_ncols=True)
    try:
        gpus = float(ray.cluster_resources().get("GPU", 0.0))
        if (settings.device or "").startswith("cuda") and gpus == 0:
            raise UserError(f"--device {settings.device}: the Ray cluster has no GPUs")
        res = stage_resources(settings, stages or {}, gpus)
        for row in build_dataset(jobs, settings, res).iter_rows():
            doc = json.loads(row["result"])
            result = ClipResult(**{f.name: doc[f.name] for f in fields(ClipResult)})
            results.append(result)
            bar.update(1)
            bar.set_postfix_str(f"{result.name}: {result.status}")
            if not progress:
                logger.info("[%d/%d] %s %s%s", len(results), len(jobs), result.name, result.status,
                            f" ({result.error})" if result.error else "")  # fmt: skip
            if on_result is not None:
                on_result(result)
    finally:
        bar.close()
        if started_here:
            ray.shutdown()
    return results
