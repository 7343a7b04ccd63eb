"""The three stage interfaces of the world model: caption, predict, render. Any object with these methods can
stand in for a stage (the shipped adapters are pipeline.captioner, pipeline.predictor and pipeline.renderer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import torch

# callback(stage, done, total): called as each stage starts (done=0), after each batch, and during rendering after
# each denoising step (done unchanged). It may raise (e.g. to cancel a job or on a deadline); the exception
# propagates out of the call unchanged, so work stops within one batch or one denoising step.
ProgressCallback = Callable[[str, int, int], None]
# step_callback(): called by a renderer after each denoising step; it may raise to stop the render there.
StepCallback = Callable[[], None]


class Captioner(Protocol):
    """Frames, each (H, W, 3) uint8 RGB -> one state text per frame."""

    def caption(self, frames: list[np.ndarray]) -> list[str]: ...


@runtime_checkable
class ScoringCaptioner(Protocol):
    """A captioner that also says how sure it is: (state, mean log-probability per generated token) per frame.
    The pipeline uses it when a captioner has it (the shipped adapter does), else `caption` alone."""

    def caption_scored(self, frames: list[np.ndarray]) -> list[tuple[str, float]]: ...


class Predictor(Protocol):
    """Histories of states (B lists) -> the next `k` states of each. `truncate`: cut states longer than the
    model reads instead of raising (captions of out-of-domain frames may run long)."""

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]: ...


class ActionPredictor(Predictor, Protocol):
    """A predictor that forecasts under actions (the pipeline uses it when `actions` is not empty): actions[b][i]
    is the action after state i of history b and its forecast (None: unknown); returns the states and, per
    history, the actions each forecast step read (pipeline.predictor.Predictor.predict_under)."""

    actions: tuple[str, ...]

    def predict_under(
        self,
        states: list[list[str]],
        k: int,
        actions: list[list[str | None]] | None = None,
        truncate: bool = False,
    ) -> tuple[list[list[str]], list[list[str | None]]]: ...


class Renderer(Protocol):
    """States -> one (H, W, 3) uint8 frame per state; randomness only from `generator`; `steps`/`guidance`
    override the renderer's own sampling defaults; `step_callback` runs after every denoising step and may
    raise to stop (a deadline or a cancel); `default_steps` is the steps used when `steps` is None."""

    @property
    def default_steps(self) -> int: ...

    def render(
        self,
        states: list[str],
        generator: torch.Generator | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        step_callback: StepCallback | None = None,
    ) -> list[np.ndarray]: ...
