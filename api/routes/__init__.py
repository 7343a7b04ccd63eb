"""One router per resource: predict, rollout, jobs, samples, health, pages."""
