"""POST /v1/plan: states in words and a goal in words in, the actions that lead there (and their states) out."""

from __future__ import annotations

import torch

from api.deps import EngineDep, PipelineDep, SettingsDep, keyed_router
from api.routes.predict import run_model
from api.schemas import PlanRequest, PlanResponse, b64png
from api.uploads import JSON_RUN_RESPONSES, check_sync_cost, refused
from pipeline.goals import parse_goal
from pipeline.interfaces import ProgressCallback
from pipeline.loading import NotLoaded
from pipeline.planning import PlanConfig

router = keyed_router("/v1", "plan", JSON_RUN_RESPONSES)


@router.post("/plan", response_model=PlanResponse, summary="Plan actions towards a goal in words")
async def plan(
    body: PlanRequest, pipeline: PipelineDep, engine: EngineDep, settings: SettingsDep
) -> PlanResponse:
    """Plan `steps` actions from `states` towards `goal` with the weights' predictor (model-predictive control:
    each step searches `candidates` action sequences of `horizon` steps and takes the best one's first action)."""
    render = not isinstance(pipeline.renderer, NotLoaded) if body.render is None else body.render
    with refused():  # a goal, states or actions that mean nothing here: refused before any work is queued
        parse_goal(body.goal, pipeline.domain)
        config = PlanConfig(body.horizon, body.candidates, body.method, body.iterations, seed=body.seed)
        pipeline.check_states([s.strip() for s in body.states])
        pipeline.check_actions(body.actions)
        if not pipeline.actions:
            raise ValueError("plan: these weights forecast from states alone; planning needs actions")
        if render:
            check_sync_cost(body.steps, None, pipeline, settings)  # (weights without a renderer say so here)

    def work(callback: ProgressCallback):  # type: ignore[no-untyped-def]
        generator = torch.Generator("cpu").manual_seed(body.seed)
        return pipeline.plan(states=body.states, actions=body.actions, goal=body.goal, steps=body.steps,
                             config=config, render=render, generator=generator, callback=callback)  # fmt: skip

    out = await run_model(engine, settings, work, "plan")
    return PlanResponse(**out.document(), frames=[b64png(f) for f in out.predicted_frames])
