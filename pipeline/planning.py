"""Planning in words: choose actions by forecasting their outcome with the predictor and scoring it against a goal.

Model-predictive control. At each step the planner searches action sequences of `horizon` steps from the
current history, rolls every candidate out with the predictor in one batch, scores each forecast with the goal
(pipeline.goals), takes the first action of the best, and plans again from the state that action leads to. Two
searches:

    shooting   `candidates` sequences at once: the constant ones ("up up up ..."), each first action followed
               by each held action ("stay up up ..."), the rest drawn uniformly at random
    cem        the cross-entropy method for discrete actions: `iterations` rounds of `candidates` sequences, each
               round drawn from per-step action probabilities refitted to the best `elite` of the round before

The rollouts use the 4-tensor model's one forward per predicted state: candidates that share their first j
actions share their first j forecast states, so each forward runs once per distinct prefix (at step 1 there are
only as many as there are actions).

    planner = Planner(predictor, domain, "return the ball", PlanConfig(horizon=4, candidates=27))
    step = planner.step(history, past_actions)      # step.action, step.forecast, step.cost
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pipeline.goals import Goal, parse_goal, state_fields
from pipeline.interfaces import ProgressCallback
from pipeline.utils import UserError

METHODS = ("shooting", "cem")
MAX_PLAN_HORIZON = 16
MAX_CANDIDATES = 1024
MAX_PLAN_STEPS = 256


@dataclass(frozen=True)
class PlanConfig:
    """How the planner searches. horizon: forecast steps per candidate; candidates: sequences per round;
    method: "shooting" (one round) or "cem"; iterations and elite: the cross-entropy method's rounds and the
    share of a round refitted to; seed: the draws (the same seed, the same plan)."""

    horizon: int = 4
    candidates: int = 27
    method: str = "shooting"
    iterations: int = 2
    elite: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value, top in (("horizon", self.horizon, MAX_PLAN_HORIZON),
                                 ("candidates", self.candidates, MAX_CANDIDATES), ("iterations", self.iterations, 16)):  # fmt: skip
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
                raise ValueError(f"{name} must be an integer in 1..{top}, got {value!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not 0 < self.elite <= 1:
            raise ValueError(f"elite must be in (0, 1], got {self.elite!r}")


@dataclass
class PlanStep:
    """One planning step: the action chosen, the best candidate's actions and forecast (states in words), its
    cost and whether the goal holds in that forecast, how many candidates were scored and how long it took."""

    action: str
    sequence: list[str]
    forecast: list[str]
    cost: float
    holds: bool
    candidates: int
    seconds: float


@dataclass
class Plan:
    """A plan of `steps` actions made in the model's imagination: after each chosen action, the state the model
    forecasts under it becomes the history the next step plans from. `reached`: the first step (1-based) after
    which the goal holds on the planned states, None if it never does."""

    goal: str
    actions: list[str]
    states: list[str]
    steps: list[PlanStep] = field(default_factory=list)
    reached: int | None = None

    @property
    def seconds_per_step(self) -> float:
        return sum(s.seconds for s in self.steps) / max(len(self.steps), 1)


def aligned_past(history: Sequence[str], past: Sequence[str | None] | None) -> list[str | None]:
    """One action after each history state but the last: `past` cut to that length, None (unknown) where short."""
    n = max(len(history) - 1, 0)
    got: list[str | None] = list(past or [])[:n]
    return got + [None] * (n - len(got))


class Planner:
    """Chooses actions for one goal with one predictor (a predictor with actions) in one domain."""

    def __init__(
        self, predictor: Any, domain: Any, goal: Goal | str, config: PlanConfig | None = None
    ) -> None:
        self.actions: tuple[str, ...] = tuple(getattr(predictor, "actions", ()) or ())
        if not self.actions:
            raise UserError(
                "plan: this predictor forecasts from states alone; planning needs one with actions"
            )
        self.predictor = predictor
        self.domain = domain
        self.goal = goal if isinstance(goal, Goal) else parse_goal(goal, domain)
        self.config = config or PlanConfig()
        self.rng = np.random.default_rng(self.config.seed)
        self._fields: dict[str, dict[str, Any] | None] = {}  # state text -> its fields (forecasts repeat)
        # The shared-prefix rollout drives the adapter's window step by step; a model with a tensor memory (whose
        # state runs through the whole history) and stand-ins take predict_under.
        self._fast = all(
            hasattr(predictor, a) for a in ("encode_histories", "predict_ids", "action_slot")
        ) and not getattr(predictor, "has_memory", False)

    def reseed(self) -> None:
        """Restart the search's random draws from the config's seed."""
        self.rng = np.random.default_rng(self.config.seed)

    # ---- scoring --------------------------------------------------------------------------------------------
    def fields(self, state: str) -> dict[str, Any] | None:
        if state not in self._fields:
            self._fields[state] = state_fields(self.domain, state)
        return self._fields[state]

    def score(self, history: list[str], forecasts: list[list[str]], sequences: np.ndarray) -> np.ndarray:
        """The goal's cost of each forecast (C,), judged from the latest state of the history that parses (a
        model may write a state that does not, and a plan goes on from it)."""
        now = self.latest(history)
        costs = np.empty(len(forecasts))
        for c, (states, seq) in enumerate(zip(forecasts, sequences, strict=True)):
            costs[c] = self.goal.cost(now, [self.fields(s) for s in states], [self.actions[a] for a in seq])
        return costs

    def latest(self, history: Sequence[str]) -> dict[str, Any]:
        """The fields of the latest state of `history` that parses; a UserError when none does."""
        for state in reversed(history):
            if (got := self.fields(state)) is not None:
                return got
        raise UserError(f"plan: no state of the history is a state of the {self.domain.name} domain")

    # ---- candidates -----------------------------------------------------------------------------------------
    def structured(self) -> np.ndarray:
        """The constant sequences, then each first action followed by each held action: (A + A * (A - 1), H)."""
        A, H = len(self.actions), self.config.horizon
        rows = [[a] * H for a in range(A)]
        rows += [[a] + [b] * (H - 1) for a in range(A) for b in range(A) if a != b and H > 1]
        return np.asarray(rows, dtype=np.int64).reshape(-1, H)

    def draw(self, probs: np.ndarray, n: int) -> np.ndarray:
        """n sequences (n, H) drawn step by step from probs (H, A)."""
        cum = probs.cumsum(axis=1)  # (H, A)
        u = self.rng.random((n, probs.shape[0], 1))
        return np.minimum((u > cum[None]).sum(axis=2), probs.shape[1] - 1)

    # ---- rollouts -------------------------------------------------------------------------------------------
    def rollout(self, history: list[str], past: list[str | None], sequences: np.ndarray) -> list[list[str]]:
        """The forecast (H states) of every candidate (C, H) from the history; past[i]: the action after history
        state i (len(history) - 1 of them, None: unknown)."""
        if not self._fast:
            acts = [[*past, *(self.actions[a] for a in seq)] for seq in sequences]
            states, _ = self.predictor.predict_under([history] * len(sequences), sequences.shape[1], acts)
            return [list(s) for s in states]
        p, slot = self.predictor, self.predictor.action_slot
        ids = torch.tensor(
            p.tokenizer.action_ids(list(self.actions)), dtype=torch.long, device=p.device
        )  # (A,)
        base = p.encode_histories([history], actions=[[*past, None]]).to(p.device)  # (1, T, N)
        C, H = sequences.shape
        first, rows = np.unique(sequences[:, 0], return_inverse=True)
        windows = base.expand(len(first), -1, -1).clone()  # (U, T, N): one per distinct first action
        windows[:, -1, slot] = ids[torch.as_tensor(first)]
        out = torch.empty(C, H, base.shape[-1], dtype=torch.long)  # (C, H, N)
        for j in range(H):
            nxt, _ = p.predict_ids(windows, 1)  # (U, 1, N)
            out[:, j] = nxt[torch.as_tensor(rows.reshape(-1)), 0].cpu()
            if j + 1 == H:
                break
            keys, pick, new_rows = np.unique(
                sequences[:, : j + 2], axis=0, return_index=True, return_inverse=True
            )
            parent = torch.as_tensor(rows.reshape(-1)[pick])  # each new prefix's row at this step
            state = nxt[parent, 0].clone()  # (U', N)
            state[:, slot] = ids[torch.as_tensor(keys[:, -1])]
            windows = torch.cat([windows[parent, 1:], state[:, None]], dim=1)  # (U', T, N)
            rows = new_rows
        spelled: dict[tuple[int, ...], str] = {}
        forecasts = []
        for c in range(C):
            row = []
            for j in range(H):
                key = tuple(out[c, j, :slot].tolist())
                if key not in spelled:
                    spelled[key] = p.tokenizer.spell(out[c, j])
                row.append(spelled[key])
            forecasts.append(row)
        return forecasts

    # ---- one step -------------------------------------------------------------------------------------------
    def step(
        self,
        history: Sequence[str],
        past: Sequence[str | None] | None = None,
        check: Callable[[], None] | None = None,
    ) -> PlanStep:
        """Plan from `history` (past: the action after each history state but the last, None where unknown):
        the first action of the best sequence found, with its forecast. check() runs after each round of the
        search and may raise (a deadline, a cancel) to stop there."""
        start = time.perf_counter()
        history = list(history)
        if not history:
            raise UserError("plan: needs at least one state to plan from")
        past = aligned_past(history, past)
        cfg, A = self.config, len(self.actions)
        probs = np.full((cfg.horizon, A), 1.0 / A)
        best: tuple[float, np.ndarray, list[str]] | None = None
        scored = 0
        rounds = cfg.iterations if cfg.method == "cem" else 1
        for r in range(rounds):
            seqs = (
                self.structured()[: cfg.candidates] if r == 0 else np.empty((0, cfg.horizon), dtype=np.int64)
            )
            if best is not None:
                seqs = np.concatenate([best[1][None], seqs])  # the best so far stays in the running
            seqs = np.concatenate([seqs, self.draw(probs, max(cfg.candidates - len(seqs), 0))])
            forecasts = self.rollout(history, past, seqs)
            costs = self.score(history, forecasts, seqs)
            scored += len(seqs)
            i = int(np.argmin(costs))  # ties: the earliest, so the structured (steady) sequences first
            if best is None or costs[i] < best[0]:
                best = (float(costs[i]), seqs[i].copy(), forecasts[i])
            if check is not None:
                check()
            if cfg.method == "cem":
                elite = seqs[np.argsort(costs, kind="stable")[: max(1, round(cfg.elite * len(seqs)))]]
                freq = np.stack([(elite == a).mean(axis=0) for a in range(A)], axis=1)  # (H, A)
                probs = 0.3 * probs + 0.7 * freq
        assert best is not None
        cost, seq, forecast = best
        sequence = [self.actions[a] for a in seq]
        holds = self.goal.holds(self.latest(history), [self.fields(s) for s in forecast], sequence)
        return PlanStep(sequence[0], sequence, forecast, cost, holds, scored, time.perf_counter() - start)

    def plan(
        self,
        history: Sequence[str],
        past: Sequence[str | None] | None,
        steps: int,
        callback: ProgressCallback | None = None,
    ) -> Plan:
        """`steps` actions planned in the model's imagination: each chosen action's forecast state is appended to
        the history before the next step is planned. callback("plan", done, steps) runs before the first step and
        after each; it may raise (a deadline, a cancel) to stop there."""
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_PLAN_STEPS:
            raise ValueError(f"steps must be an integer in 1..{MAX_PLAN_STEPS}, got {steps!r}")
        history = list(history)
        acts = aligned_past(history, past)
        start = len(history)
        plan = Plan(self.goal.text, [], [])
        now = self.latest(history)
        notify = callback or (lambda stage, done, total: None)
        notify("plan", 0, steps)
        for k in range(steps):
            s = self.step(history, acts, functools.partial(notify, "plan", k, steps))
            plan.steps.append(s)
            plan.actions.append(s.action)
            plan.states.append(s.forecast[0])
            history.append(s.forecast[0])
            acts.append(s.action)
            if plan.reached is None and now is not None:
                ahead = [self.fields(x) for x in history[start:]]
                if self.goal.holds(now, ahead, plan.actions):
                    plan.reached = k + 1
            notify("plan", k + 1, steps)
        return plan


@dataclass
class PlanOutput:
    """What one plan call produced: the observed states (read from the clip, or given), the planned actions and
    the states they lead to in the model's imagination, each step's search, and the planned states drawn (when
    the weights have a renderer and rendering was not turned off)."""

    goal: str
    observed_states: list[str]
    actions: list[str]
    predicted_states: list[str]
    steps: list[PlanStep]
    reached: int | None
    predicted_frames: list[np.ndarray] = field(default_factory=list)
    state_rate: float = 0.0
    domain: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The plan as JSON (plan.json, `semworld plan --json`, the body of POST /v1/plan without its frames)."""
        return {
            "goal": self.goal,
            "domain": self.domain,
            "observed_states": self.observed_states,
            "actions": self.actions,
            "predicted_states": self.predicted_states,
            "reached": self.reached,
            "steps": [
                {
                    "action": s.action,
                    "sequence": s.sequence,
                    "forecast": s.forecast,
                    "cost": round(s.cost, 4),
                    "holds": s.holds,
                    "candidates": s.candidates,
                    "ms": round(1000 * s.seconds, 2),
                }
                for s in self.steps
            ],  # fmt: skip
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }


def plan_world(
    pipe: Any,
    video: Any = None,
    *,
    states: Sequence[str] | None = None,
    actions: Sequence[str | None] | None = None,
    goal: str,
    steps: int = 8,
    config: PlanConfig | None = None,
    render: bool | None = None,
    generator: torch.Generator | None = None,
    callback: ProgressCallback | None = None,
) -> PlanOutput:
    """Plan `steps` actions towards `goal` from a clip (read by the pipeline's captioner) or from states in
    words, with the pipeline's predictor; actions: the action after each observed state (None: unknown).
    render: None draws the planned states when the weights have a renderer, True insists, False never.
    callback(stage, done, total) as for a forecast (it may raise to stop). The goal is parsed and every argument checked before any model runs."""
    from pipeline.loading import NotLoaded

    timings: dict[str, float] = {}
    start = time.perf_counter()
    parsed = parse_goal(goal, pipe.domain)
    config = config or PlanConfig()
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_PLAN_STEPS:
        raise ValueError(f"steps must be an integer in 1..{MAX_PLAN_STEPS}, got {steps!r}")
    if (video is None) == (states is None):
        raise ValueError("plan: give a clip or states in words (one of them)")
    planner = Planner(pipe.predictor, pipe.domain, parsed, config)
    pipe.check_actions(actions)
    if video is None:
        observed = [s.strip() for s in states or ()]
        pipe.check_states(observed)
    else:
        clip = pipe.read(video)
        observed = pipe.caption(clip.frames)
    past = [None if a is None else a.strip().lower() for a in actions or ()]
    if len(past) > max(len(observed) - 1, 0):
        raise ValueError(
            f"actions: {len(past)} for {len(observed)} observed states; at most one after each state but the last"
        )
    timings["observe"] = time.perf_counter() - start
    plan = planner.plan(observed, past, steps, callback)
    timings["plan"] = sum(s.seconds for s in plan.steps)
    frames: list[np.ndarray] = []
    if render or (render is None and not isinstance(pipe.renderer, NotLoaded)):
        t = time.perf_counter()
        frames = pipe.render(plan.states, generator=generator, notify=callback)
        timings["render"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    return PlanOutput(parsed.text, observed, plan.actions, plan.states, plan.steps, plan.reached, frames,
                      float(pipe.default_state_rate or 0.0), pipe.domain.name, timings)  # fmt: skip
