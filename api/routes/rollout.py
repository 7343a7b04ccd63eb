"""POST /v1/rollout: states in words in, the next states and their frames out (the what-if entry point)."""

from __future__ import annotations

import torch

from api.deps import EngineDep, PipelineDep, SettingsDep, keyed_router
from api.routes.predict import run_model
from api.schemas import RolloutRequest, RolloutResponse, b64png, states_fields
from api.uploads import JSON_RUN_RESPONSES, check_params, check_sync_cost, refused
from pipeline.interfaces import ProgressCallback

router = keyed_router("/v1", "rollout", JSON_RUN_RESPONSES)


@router.post("/rollout", response_model=RolloutResponse, summary="Continue states written in words")
async def rollout(
    body: RolloutRequest, pipeline: PipelineDep, engine: EngineDep, settings: SettingsDep
) -> RolloutResponse:
    """Predict `horizon` states after `states` and render them; edit any state and call again to re-roll."""
    check_params(settings, body.states, horizon=body.horizon, steps=body.steps, guidance=body.guidance)
    n_context = min(body.render_context, len(body.states)) if body.render else 0
    with refused():  # words the models cannot read, actions it cannot take: refused before any work is queued
        pipeline.check_states([s.strip() for s in body.states])
        pipeline.check_actions(body.actions)
        if body.render:
            check_sync_cost(body.horizon + n_context, body.steps, pipeline, settings)  # (or: no renderer)

    def work(callback: ProgressCallback) -> tuple:
        generator = torch.Generator("cpu").manual_seed(body.seed) if body.seed is not None else None
        out = pipeline(
            states=body.states,
            horizon=body.horizon,
            generator=generator,
            steps=body.steps,
            guidance=body.guidance,
            render=body.render,
            callback=callback,
            actions=body.actions,
        )
        context = []
        if n_context:
            context = pipeline.render(
                out.observed_states[-n_context:],
                generator=generator,
                steps=body.steps,
                guidance=body.guidance,
                notify=callback,  # the same deadline, between batches and denoising steps
            )
        return out, context

    out, context = await run_model(engine, settings, work, "rollout")
    engine.metrics.observe_timings(out.timings)
    return RolloutResponse(
        **states_fields(out),
        frames=[b64png(f) for f in out.predicted_frames],
        context_frames=[b64png(f) for f in context],
        timings={k: round(v, 4) for k, v in out.timings.items()},
    )
