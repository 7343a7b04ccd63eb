"""Request and response bodies of the HTTP API (pydantic), with examples for the OpenAPI schema."""

from __future__ import annotations

import base64
from enum import StrEnum
from typing import Any, Literal

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from api.settings import STATES_LIMIT
from pipeline.outputs import png_bytes, state_fields
from pipeline.params import HORIZON_MAX, Guidance, Horizon, Seed, Steps
from pipeline.world_model import WorldModelOutput

THUMB_SIDE = 192  # observed frames come back scaled down to this longest side

_STATES_EXAMPLE = [
    "red box top right , orange ball top midleft .",
    "red box top right , orange ball top center .",
]
_PREDICTED_EXAMPLE = [
    "red box top right , orange ball top midright .",
    "red box top right , orange ball top right .",
]


class OutputFormat(StrEnum):
    json = "json"
    mp4 = "mp4"
    zip = "zip"


class ErrorResponse(BaseModel):
    detail: str = Field(examples=["the file is empty"])


class StatesResponse(BaseModel):
    """What /v1/predict, a job's result and /v1/rollout say about their states, under the same names: how sure
    each observed state is, whether the states parse in the weights' domain, and the semantic timeline."""

    observed_states: list[str] = Field(examples=[_STATES_EXAMPLE])
    predicted_states: list[str] = Field(examples=[_PREDICTED_EXAMPLE])
    observed_confidence: list[float | None] = Field(
        default_factory=list,
        description="per observed state: the captioner's mean token log-probability (0 is sure); null for "
        "states given in words or a captioner that does not score",
    )
    observed_parses: list[bool | None] = Field(
        default_factory=list,
        description="per observed state: whether it parses in the weights' domain (null: a domain without a "
        "grammar, such as free text)",
    )
    predicted_parses: list[bool | None] = Field(
        default_factory=list,
        description="per predicted state: whether it parses in the weights' domain (null: a domain without a "
        "grammar, such as free text)",
    )
    confidence_threshold: float | None = Field(
        None, description="below it a read state is unsure (null: the weights and their domain set none)"
    )
    domain: str | None = Field(None, description="the domain the states are written in (model_index.json's)",
                               examples=["shapes"])  # fmt: skip
    warnings: list[str] = Field(
        default_factory=list, description="e.g. that the clip is outside what the models know"
    )
    changes: list[list[str]] = Field(
        default_factory=list,
        description="the semantic timeline: per step (observed states, then predicted), what changed since the "
        "step before, in words ([] for the first step and for no change)",
        examples=[[[], ["orange ball moved from top midleft to top center"]]],
    )
    actions: list[str | None] = Field(
        default_factory=list,
        description="a predictor with actions: the action after each observed state, then after each predicted "
        "state but the last (null: not given, read as unknown); [] for a predictor of states alone",
    )


class PredictResponse(StatesResponse):
    """Observed and predicted states; frames are base64-encoded PNG images."""

    frames: list[str] = Field(description="predicted frames, base64 PNG, one per predicted state")
    observed_frames: list[str] = Field(
        default_factory=list, description=f"sampled input frames, base64 PNG, at most {THUMB_SIDE} px"
    )
    state_rate: float = Field(
        gt=0, description="states per second (frame rate of the predicted video)", examples=[25.0]
    )
    source_indices: list[int] = Field(
        default_factory=list, description="clip frame index of each observed state"
    )
    timings: dict[str, float] = Field(
        default_factory=dict, description="seconds per stage", examples=[{"caption": 0.12, "total": 0.4}]
    )


class RolloutRequest(BaseModel):
    """States in words (the past, oldest first) to continue: the what-if entry point. Strict types, as the
    schema says: `true` is not an integer and `"2"` is not a number."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={"examples": [{"states": list(_STATES_EXAMPLE), "horizon": 2, "seed": 0}]},  # type: ignore[dict-item]
    )

    states: list[str] = Field(
        min_length=1, max_length=STATES_LIMIT, description="one state per step, oldest first"
    )
    horizon: Horizon = 8
    seed: Seed | None = Field(0, description="renderer seed; null for a random one")
    steps: Steps = None
    guidance: Guidance = None
    render: bool = Field(True, description="draw the predicted states")
    render_context: int = Field(
        0,
        ge=0,
        le=STATES_LIMIT,
        description="also draw the last N given states (e.g. 1 for a state the user just edited; all of them "
        "when N > len(states))",
    )
    actions: list[str | None] | None = Field(
        None,
        max_length=STATES_LIMIT + HORIZON_MAX,
        description="a predictor with actions (docs/atari.md): the action after each given state (null: "
        "unknown), then one per forecast step; at most len(states) + horizon - 1",
    )


class RolloutResponse(StatesResponse):
    """The given states (observed_states) and the predicted ones, with the fields /v1/predict gives."""

    frames: list[str] = Field(description="predicted frames, base64 PNG")
    context_frames: list[str] = Field(
        default_factory=list, description="frames of the last render_context states"
    )
    timings: dict[str, float] = Field(default_factory=dict)


class StageProgress(BaseModel):
    done: int = Field(examples=[3])
    total: int = Field(examples=[8])


class JobStatusResponse(BaseModel):
    id: str = Field(examples=["3f6c2d0e9b8a4c1d8e7f6a5b4c3d2e1f"])
    state: str = Field(description="queued, running, succeeded, failed or canceled", examples=["running"])
    progress: dict[str, StageProgress] = Field(
        description="per stage: decode, caption, predict, render, encode",
        examples=[{"decode": {"done": 1, "total": 1}, "caption": {"done": 16, "total": 32}}],
    )
    error: str | None = Field(None, examples=[None])
    attempts: int = Field(0, description="runs started (a crash mid-run means another)")
    cancel_requested: bool = False
    created_at: float
    updated_at: float
    params: dict[str, Any] = Field(default_factory=dict)
    result_url: str | None = Field(None, examples=["/v1/jobs/3f6c2d0e9b8a4c1d8e7f6a5b4c3d2e1f/result"])
    warnings: list[str] = Field(
        default_factory=list,
        description="of a finished job: e.g. that most of the clip is unsure, read by models that do not know it",
    )


class JobCreatedResponse(JobStatusResponse):
    status_url: str = Field(examples=["/v1/jobs/3f6c2d0e9b8a4c1d8e7f6a5b4c3d2e1f"])


class JobListResponse(BaseModel):
    """A page of jobs, newest first. While `has_more`, the next page is `?after=<last_id>` (same filters)."""

    data: list[JobStatusResponse] = Field(description="the jobs of this page, newest first")
    has_more: bool = Field(description="whether older jobs follow this page")
    first_id: str | None = Field(None, description="the first (newest) job's id; null for an empty page")
    last_id: str | None = Field(
        None,
        description="the last (oldest) job's id: pass it as `after` for the next page; null for an empty page",
    )


class HealthResponse(BaseModel):
    status: str = Field(examples=["ok"])


class ReadyResponse(BaseModel):
    ready: bool
    detail: str | None = None
    warmup_seconds: float | None = None


class ModelInfo(BaseModel):
    """The loaded weights: the domain their states are written in, the action words their predictor forecasts
    under (empty: states alone), which image stages are there, and the states it reads and produces."""

    domain: str = Field(examples=["pong"])
    description: str = Field(description="what the domain's states describe, in one line")
    actions: list[str] = Field(
        examples=[["stay", "up", "down"]], description="empty for a predictor of states alone"
    )
    captioner: bool = Field(description="clips can be read (POST /v1/predict, /v1/jobs)")
    renderer: bool = Field(description="states can be drawn (frames in every response)")
    context: int | None = Field(None, description="the states the predictor reads at once (T), when it says")
    state_rate: float | None = Field(None, description="states per second a clip is read at by default")
    goals: list[str] = Field(
        default_factory=list,
        examples=[["return the ball", "score a point", "follow the ball"]],
        description="the domain's named goals (POST /v1/plan takes them, conditions on its fields and their "
        "conjunctions with 'and'); empty when it has none",
    )


class SampleInfo(BaseModel):
    name: str = Field(examples=["world-bounce-0.mp4"])
    url: str = Field(examples=["/v1/samples/world-bounce-0.mp4"])
    size: int


def b64png(frame: np.ndarray) -> str:
    return base64.b64encode(png_bytes(frame)).decode("ascii")


def thumbnail(frame: np.ndarray, side: int = THUMB_SIDE) -> np.ndarray:
    h, w = frame.shape[:2]
    if max(h, w) <= side:
        return frame
    s = side / max(h, w)
    return cv2.resize(frame, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)


def predict_payload(output: WorldModelOutput) -> dict[str, Any]:
    """The JSON body of a prediction (also what a finished job stores as result.json)."""
    return PredictResponse(
        frames=[b64png(f) for f in output.predicted_frames],
        observed_frames=[b64png(thumbnail(f)) for f in output.observed_frames],
        state_rate=output.state_rate,
        source_indices=output.source_indices,
        timings={k: round(v, 4) for k, v in output.timings.items()},
        **states_fields(output),
    ).model_dump()


def states_fields(output: WorldModelOutput) -> dict[str, Any]:
    """The StatesResponse fields of an output: the same as `semworld predict --json` says (pipeline.outputs)."""
    return state_fields(output)


class PlanRequest(BaseModel):
    """States in words to plan from and a goal in words (docs/planning.md); the weights' predictor must forecast
    under actions. Strict types, as for /v1/rollout."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={"examples": [{
            "states": ["ball 20 38 player 32 enemy 38 score 1 3 .", "ball 19 37 player 29 enemy 37 score 1 3 ."],
            "goal": "return the ball", "steps": 8,
        }]},  # type: ignore[dict-item]
    )  # fmt: skip

    states: list[str] = Field(
        min_length=1, max_length=STATES_LIMIT, description="one state per step, oldest first"
    )
    actions: list[str | None] | None = Field(
        None,
        max_length=STATES_LIMIT,
        description="the action after each given state but the last (null: unknown)",
    )
    goal: str = Field(min_length=1, max_length=500, description="a goal in words, e.g. 'return the ball'")
    steps: int = Field(8, ge=1, le=64, description="actions to plan")
    horizon: int = Field(4, ge=1, le=16, description="forecast steps per candidate sequence")
    candidates: int = Field(27, ge=1, le=256, description="candidate sequences per round")
    method: Literal["shooting", "cem"] = Field(
        "shooting", description="random shooting or the cross-entropy method"
    )
    iterations: int = Field(2, ge=1, le=8, description="rounds of the cross-entropy method")
    seed: Seed = Field(0, description="the search's random draws (and the renderer's)")
    render: bool | None = Field(
        None, description="draw the planned states (null: when the weights have a renderer)"
    )


class PlanStepResponse(BaseModel):
    action: str
    sequence: list[str] = Field(description="the best candidate's actions, the first of which was taken")
    forecast: list[str] = Field(description="the best candidate's forecast, in words")
    cost: float = Field(description="the goal's cost of that forecast (the lower, the nearer)")
    holds: bool = Field(description="whether the goal holds in that forecast")
    candidates: int
    ms: float = Field(description="planning time of this step")


class PlanResponse(BaseModel):
    """The plan: an action per step and the state the model forecasts it leads to, each step's search, and the
    planned frames when drawn."""

    goal: str
    domain: str | None = None
    observed_states: list[str]
    actions: list[str]
    predicted_states: list[str]
    reached: int | None = Field(description="the first step after which the goal holds on the planned states")
    steps: list[PlanStepResponse]
    frames: list[str] = Field(default_factory=list, description="planned frames, base64 PNG")
    timings: dict[str, float] = Field(default_factory=dict)
