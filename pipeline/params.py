"""The parameters of one forecast call, declared once: what each means and the range it may take.

`ForecastParams` is the one model of them (pydantic). The pipeline's check (`world_model.check_call`), a batch
run's settings and its manifest lines (`pipeline.batch.jobs`) validate through it, and the service's form, JSON
body and settings take their ranges from the limits below, so a limit changes in one line. A caller may apply a
stricter limit of its own on top (the service's `SEMWORLD_MAX_HORIZON`, a pipeline's `max_horizon`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

HORIZON_MAX = 32  # states predicted per call
STRIDE_MAX = 1000  # frames skipped between two states
STATE_RATE_MAX = 240.0  # states per second
SEED_MAX = 2**32 - 1  # seeds are 0..SEED_MAX (exact as a JSON number in every client)
STEPS_MAX = 1000  # renderer denoising steps
GUIDANCE_MAX = 50.0  # renderer guidance scale


# The parameters that more than one model of a request takes (ForecastParams, the service's rollout and plan
# bodies), as types, so that each declares them once: `steps: Steps = None`.
Horizon = Annotated[int, Field(ge=1, le=HORIZON_MAX, description="states to predict")]
Seed = Annotated[int, Field(ge=0, le=SEED_MAX, description="renderer seed")]
Steps = Annotated[
    int | None, Field(ge=1, le=STEPS_MAX, description="denoising steps (default: the renderer's)")
]
Guidance = Annotated[
    float | None,
    Field(ge=0, le=GUIDANCE_MAX, allow_inf_nan=False, description="guidance scale (default: the renderer's)"),
]


class ForecastParams(BaseModel):
    """One forecast call: how the clip is read, how far to forecast, how the frames are drawn."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    horizon: Horizon = 8
    stride: int | None = Field(None, ge=1, le=STRIDE_MAX, description="take every K-th frame of the clip")
    state_rate: float | None = Field(
        None,
        gt=0,
        le=STATE_RATE_MAX,
        allow_inf_nan=False,
        description="or: take frames this many times a second",
    )
    context: int | None = Field(None, ge=1, description="observe only the first N sampled states of the clip")
    seed: Seed = 0
    steps: Steps = None
    guidance: Guidance = None

    @model_validator(mode="after")
    def _one_way_to_sample(self) -> ForecastParams:
        if self.stride is not None and self.state_rate is not None:
            raise ValueError("give either stride or state_rate, not both")
        return self


def check_params(where: str = "", **values: Any) -> ForecastParams:
    """`ForecastParams(**values)`, or a ValueError naming the first bad parameter and its value ("horizon: Input
    should be less than or equal to 32, got 40"); `where` goes before it (e.g. a manifest's "file:line: ").
    Integers are accepted where a number is asked for; None means the default."""
    given = {k: v for k, v in values.items() if v is not None}
    for key in ("state_rate", "guidance"):  # a whole number is a number
        if isinstance(given.get(key), int) and not isinstance(given[key], bool):
            given[key] = float(given[key])
    try:
        return ForecastParams(**given)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        if not field:  # a rule across fields
            raise ValueError(f"{where}{message}") from None
        raise ValueError(f"{where}{field}: {message}, got {given.get(field, first.get('input'))!r}") from None
