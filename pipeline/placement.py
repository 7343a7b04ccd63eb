"""Where each stage runs and in which dtype, chosen in one place: the CLI flags, the service settings and the
Python API all hand their device/dtype options to `resolve_placement`, and every stage reads its own entry.

Defaults: every stage on CUDA when present, else the CPU. The Hugging Face stages (captioner, renderer) run in
bfloat16 on CUDA where the GPU supports it (float16 otherwise) and float32 elsewhere (`utils.default_dtype`). The
predictor runs its matrix products in bfloat16 under autocast on a CUDA GPU with bfloat16 (float32 otherwise: its
attention masks use the dtype's smallest value, and float16's range is tight), with its weights and its softmax
kept in float32 (models/four_tensor.py). Any stage may be moved or given another dtype by name.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from pipeline.utils import STAGES, UserError, default_dtype, resolve_device

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}  # fmt: skip


def parse_dtype(value: str | torch.dtype, what: str = "--dtype") -> torch.dtype:
    """'float32' / 'fp32', 'bfloat16' / 'bf16', 'float16' / 'fp16' (or a torch float dtype) -> the dtype."""
    if isinstance(value, torch.dtype):
        if value not in DTYPES.values():
            raise UserError(f"{what} {value}: expected float32, bfloat16 or float16")
        return value
    dtype = DTYPES.get(str(value).strip().lower())
    if dtype is None:
        raise UserError(f"{what} {value!r}: expected one of float32, bfloat16, float16 (or fp32, bf16, fp16)")
    return dtype


def parse_stage_options(items: Iterable[str] | Mapping[str, str] | None, what: str) -> dict[str, str]:
    """['predictor=cpu', ...] or {'predictor': 'cpu'} -> {'predictor': 'cpu'}; unknown stages are a UserError."""
    if items is None:
        return {}
    pairs = list(items.items()) if isinstance(items, Mapping) else []
    if not isinstance(items, Mapping):
        for item in items:
            stage, sep, value = str(item).partition("=")
            if not sep or not value.strip():
                raise UserError(f"{what} {item!r}: expected STAGE=VALUE, e.g. predictor=cpu")
            pairs.append((stage, value))
    out: dict[str, str] = {}
    for stage, value in pairs:
        stage = stage.strip().lower()
        if stage not in STAGES:
            raise UserError(f"{what} {stage}={value}: unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        out[stage] = str(value).strip()
    return out


@dataclass(frozen=True)
class StagePlacement:
    """One stage's device and compute dtype."""

    device: torch.device
    dtype: torch.dtype


@dataclass(frozen=True)
class Placement:
    """Every stage's device and dtype, and whether the predictor's rollout step is compiled (torch.compile)."""

    captioner: StagePlacement
    predictor: StagePlacement
    renderer: StagePlacement
    compile: bool = False

    def __getitem__(self, stage: str) -> StagePlacement:
        if stage not in STAGES:
            raise KeyError(stage)
        placement: StagePlacement = getattr(self, stage)
        return placement

    def describe(self, stages: Iterable[str] = STAGES) -> str:
        """'captioner cuda:0 bfloat16, predictor ...' for the log, of the `stages` that are loaded."""
        wanted = set(stages)
        parts = [
            f"{s} {self[s].device} {str(self[s].dtype).removeprefix('torch.')}" for s in STAGES if s in wanted
        ]
        compiled = self.compile and "predictor" in wanted
        return ", ".join(parts) + (", predictor compiled" if compiled else "")


def predictor_dtype(device: torch.device) -> torch.dtype:
    """The predictor's default compute dtype: bfloat16 on a CUDA GPU that has it, float32 everywhere else."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def resolve_placement(
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    *,
    stage_devices: Iterable[str] | Mapping[str, str] | None = None,
    stage_dtypes: Iterable[str] | Mapping[str, str] | None = None,
    compile: bool = False,
) -> Placement:
    """The placement of every stage. `device` and `dtype` hold for all stages (None: the defaults above);
    `stage_devices` / `stage_dtypes` ('predictor=cpu' items or a mapping) override them stage by stage."""
    devices = parse_stage_options(stage_devices, "--stage-device")
    dtypes = parse_stage_options(stage_dtypes, "--stage-dtype")
    common = resolve_device(device)  # a device this machine lacks: one line
    common_dtype = parse_dtype(dtype) if dtype is not None else None
    chosen: dict[str, StagePlacement] = {}
    for stage in STAGES:
        dev = resolve_device(devices[stage]) if stage in devices else common
        if stage in dtypes:
            dt = parse_dtype(dtypes[stage], f"--stage-dtype {stage}=")
        elif common_dtype is not None:
            dt = common_dtype
        else:
            dt = predictor_dtype(dev) if stage == "predictor" else default_dtype(dev)
        chosen[stage] = StagePlacement(dev, dt)
    return Placement(chosen["captioner"], chosen["predictor"], chosen["renderer"], compile=bool(compile))


# ---- CPU threads ---------------------------------------------------------------------------------------------
def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """Torch's intra-op threads when none are asked for: one fewer than the usable cores (at least 1).

    Torch's default, one thread per core, falls off a cliff as soon as anything else runs on the machine: its
    workers wait for each other at every operation, so one busy core stalls them all (bench/threads.py, 2 cores:
    a warm pipeline call 0.23 s idle, 1.09 s beside one busy process and 20.8 s beside two, against 0.26, 0.27
    and 0.54 s with one thread). Leaving a core free keeps that from happening at a small cost when the machine
    is idle (docs/benchmarks.md).
    """
    return max(1, usable_cores() - 1)


def set_threads(threads: int | None = None) -> int:
    """Set torch's CPU threads for this process (None: `default_threads()`); returns the number set."""
    n = default_threads() if threads is None else int(threads)
    if n < 1:
        raise UserError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(n)
    return n
