"""One router per resource: model, predict, rollout, plan, jobs, samples, health, pages, docs."""
