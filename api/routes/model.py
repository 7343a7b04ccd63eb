"""GET /v1/model: what the loaded weights are (their domain, its action words, which stages are there), so that a
client (the page's play mode) knows what it may ask for before it asks."""

from __future__ import annotations

from api.deps import PipelineDep, keyed_router
from api.schemas import ModelInfo

router = keyed_router("/v1", "model")


@router.get("/model", response_model=ModelInfo, summary="What the loaded weights read, forecast and draw")
def model_info(pipeline: PipelineDep) -> ModelInfo:
    context = getattr(pipeline.predictor, "T", None)
    return ModelInfo(
        domain=pipeline.domain.name,
        description=pipeline.domain.description,
        actions=list(pipeline.actions),
        captioner=pipeline.captioner is not None,
        renderer=pipeline.renderer is not None,
        context=context if isinstance(context, int) else None,
        state_rate=pipeline.default_state_rate,
        goals=list(getattr(pipeline.domain, "goals", None) or {}),
    )
