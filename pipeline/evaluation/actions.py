"""The scoring behind `semworld eval actions`: a predictor with actions against the real simulator of its domain.

For each held-out test episode of the domain's simulator (the Atari emulator): a history of T true states with
the actions the behaviour policy took, then the emulator is saved and played on under several action sequences,
the logged one (the policy's) and the counterfactual ones (each action held throughout: all "up", all "down",
all "stay"). The predictor forecasts each future from the same history under the same actions; every forecast
state is compared with the emulator's.

Reported by horizon h = 1..H: exact state match under the logged actions (all targets, and the targets the
history and the actions determine), per-field accuracy and mean position error (RAM units, about a pixel each), the
same for references that read the same history (copy-last; constant velocity: every number moves on by its last
step), and under each counterfactual sequence the exact rate, the controlled object's exact rate and whether it
moved the way the emulator's did (same sign of its change from the last history state).

A target is not determined when a serve came before it (where the ball comes back into play is the console's
draw), or when another console that reads exactly as the history did went on to another state there. A state
holds positions in bins of QUANTUM RAM units, so where inside its bin each object is, hidden from the history,
can decide the next bin. The test moves the positions within their bins at the history's first state (every
combination, or a sample of `variants` of them), replays the history's actions, keeps the consoles whose every
history state reads the same, and plays each on under the logged actions. It finds only the hidden differences
that such moves reach (not those of other hidden bytes: speeds, timers), so it undercounts what the history leaves
open, and the determined-only rate errs towards the strict side.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

COUNTERFACTUALS = ("up", "down", "stay")


@dataclass
class Episode:
    """One test episode: the history, its actions, and each action sequence's true future from its end; with
    screens, also the history's screens (`context`) and each future's (the third item of a future)."""

    history: list[str]
    actions: list[str]  # the action after each history state but the last
    # name -> (actions, states) or, recorded with screens, (actions, states, screens)
    futures: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    context: list[np.ndarray] = field(default_factory=list)
    # per step of the logged future: whether a console that reads as this history does, but with some position
    # elsewhere within its bin, went on to another state under the same actions (the history does not determine it)
    hidden: list[bool] = field(default_factory=list)


def record_episodes(
    domain: Any,
    n: int,
    T: int,
    horizon: int,
    seed: int = 0,
    sticky: float = 0.0,
    screens: bool = False,
    policy: str = "mix",
    variants: int = 256,
) -> list[Episode]:
    """n test episodes of `domain.simulator` under its behaviour `policy`, each with the logged future and the
    counterfactual ones (and with `screens`, the emulator's screens of the history and of every future). With
    `variants` and a simulator that has them (no sticky actions), each episode's `hidden` steps: those where one
    of up to `variants` consoles that differ from the episode's first only within the state's bins and read the
    same through the whole history went on to another state under the logged actions."""
    episodes = []
    for i in range(n):
        emu, act = domain.simulator(i, seed=seed, policy=policy, sticky=sticky)
        others = (
            emu.variants(variants, np.random.default_rng([seed, i]))
            if variants and not sticky and hasattr(emu, "variants")
            else []
        )
        first = emu.clone() if others else None  # the console the variants are of, replayed by _hidden_steps
        ep = Episode([], [])
        for t in range(T):
            ep.history.append(emu.state())
            if screens:
                ep.context.append(emu.screen())
            if t < T - 1:
                ep.actions.append(act(emu.ram()))
                emu.step(ep.actions[-1])
        snapshot = emu.clone()  # at the last history state, before the action after it
        sequences = {"logged": None, **{f"all {a}": a for a in COUNTERFACTUALS if a in domain.actions}}
        for name, held in sequences.items():
            emu.restore(snapshot)
            acts, states, shown = [], [], []
            for _ in range(horizon):
                acts.append(held or act(emu.ram()))
                emu.step(acts[-1])
                states.append(emu.state())
                if screens:
                    shown.append(emu.screen())
            ep.futures[name] = (acts, states, shown) if screens else (acts, states)
        if others:
            ep.hidden = _hidden_steps(emu, first, others, ep)
        episodes.append(ep)
    return episodes


def _hidden_steps(emu: Any, first: Any, variants: Sequence[dict[int, int]], ep: Episode) -> list[bool]:
    """Per step of the logged future: whether a variant of the console at the history's first state (RAM writes
    that leave every history state reading the same) reached another state there under the same actions."""
    differs = [False] * len(ep.futures["logged"][1])
    for writes in variants:
        emu.restore(first)
        emu.write_ram(writes)
        play_on_if_alike(emu, ep, 0, differs)
    return differs


def play_on_if_alike(emu: Any, ep: Episode, at: int, differs: list[bool]) -> None:
    """With `emu` at history state `at` of `ep` (another console, however it got there): if it and every later
    history state read as the history's under its actions, play it on under the logged actions and mark in
    `differs` the future steps where it reached another state than the episode's."""
    acts, truth = ep.futures["logged"][:2]
    alike = emu.state() == ep.history[at]
    for t in range(at, len(ep.actions)):
        if not alike:
            return
        emu.step(ep.actions[t])
        alike = emu.state() == ep.history[t + 1]
    if not alike:
        return
    for h, action in enumerate(acts):
        emu.step(action)
        differs[h] = differs[h] or emu.state() != truth[h]


def came_into_play(before: str, after: str) -> bool:
    """Whether an object absent ("none") from state `before` is in play in `after`: a serve, where the ball comes
    back is the console's draw, so no target from there on is determined by the history."""
    return " none " in f" {before} " and " none " not in f" {after} "


def constant_velocity(history: Sequence[str], h: int) -> str:
    """Every number of the last state moved on by h times its last step (clamped to 0..63); a state whose
    words do not line up with the one before (an object came or went) is copied."""
    last, prev = history[-1].split(), history[-2].split() if len(history) > 1 else history[-1].split()
    if len(last) != len(prev) or [w.isdigit() for w in last] != [w.isdigit() for w in prev]:
        return history[-1]
    out = []
    for a, b in zip(prev, last, strict=True):
        out.append(str(min(63, max(0, int(b) + h * (int(b) - int(a))))) if b.isdigit() else b)
    return " ".join(out)


def _fields(domain: Any, state: str) -> dict[str, Any] | None:
    try:
        return domain.parse(state)
    except ValueError:
        return None


def _flat(fields: dict[str, Any]) -> dict[str, Any]:
    """{"ball": {"x": 3, "y": 4}, "cars": [1, 2]} -> {"ball x": 3, "ball y": 4, "cars 0": 1, "cars 1": 2}."""
    out: dict[str, Any] = {}
    for k, v in fields.items():
        if isinstance(v, dict):
            out.update({f"{k} {kk}": vv for kk, vv in v.items()})
        elif isinstance(v, list):
            out.update({f"{k} {i}": vv for i, vv in enumerate(v)})
        else:
            out[k] = v
    return out


def _position(key: str) -> bool:
    return not key.startswith("score")


def score_forecasts(
    domain: Any, episodes: Sequence[Episode], forecasts: Sequence[Sequence[str]], quantum: int
) -> dict[str, Any]:
    """Exact rate, determined-only exact rate (and the shares not determined: all, and those found by the hidden
    positions' test), per-field accuracy (over the targets that have the field), per position field the rate
    within one quantisation step, the last two also over the determined targets alone (`*_determined`), and the
    mean position error, by horizon."""
    H = len(forecasts[0])
    exact = np.zeros(H)
    det_hits, det_n, hidden_n = np.zeros(H), np.zeros(H), np.zeros(H)
    field_hits: dict[str, np.ndarray] = {}
    field_n: dict[str, np.ndarray] = {}
    near: dict[str, np.ndarray] = {}
    # the same counts over the determined targets alone: field -> (hits, within one step, targets) by horizon
    det_fields: dict[str, np.ndarray] = {}
    err_sum, err_n = np.zeros(H), np.zeros(H)
    for ep, pred in zip(episodes, forecasts, strict=True):
        truth = ep.futures["logged"][1]
        served = False
        for h in range(H):
            served = served or came_into_play(truth[h - 1] if h else ep.history[-1], truth[h])
            hidden = bool(ep.hidden) and ep.hidden[h]
            hidden_n[h] += hidden
            ok = domain.spell(pred[h]) == domain.spell(truth[h])
            exact[h] += ok
            determined = not served and not hidden
            if determined:
                det_hits[h] += ok
                det_n[h] += 1
            t, p = _fields(domain, truth[h]), _fields(domain, pred[h])
            if t is None:
                continue
            tf, pf = _flat(t), _flat(p) if p is not None else {}
            for k, v in tf.items():
                if v is None:  # a field the truth lacks at this step (the ball out of play)
                    continue
                field_hits.setdefault(k, np.zeros(H))[h] += pf.get(k) == v
                field_n.setdefault(k, np.zeros(H))[h] += 1
                position = _position(k) and isinstance(v, int)
                placed = position and isinstance(pf.get(k), int)  # a position the forecast gives too
                close = placed and abs(pf[k] - v) <= 1  # within one quantisation step
                if position:
                    near.setdefault(k, np.zeros(H))[h] += close
                if determined:
                    det_fields.setdefault(k, np.zeros((3, H)))[:, h] += (pf.get(k) == v, close, 1)
                if placed:
                    err_sum[h] += abs(pf[k] - v) * quantum
                    err_n[h] += 1
    n = len(episodes)
    return {
        "exact": (exact / n).round(4).tolist(),
        "exact_determined": (det_hits / np.maximum(det_n, 1)).round(4).tolist(),
        "undetermined_share": (1 - det_n / n).round(4).tolist(),
        "hidden_share": (hidden_n / n).round(4).tolist(),
        "fields": {k: (v / np.maximum(field_n[k], 1)).round(4).tolist() for k, v in field_hits.items()},
        "fields_within_one": {k: (v / np.maximum(field_n[k], 1)).round(4).tolist() for k, v in near.items()},
        "fields_determined": {
            k: (v[0] / np.maximum(v[2], 1)).round(4).tolist() for k, v in det_fields.items()
        },
        "fields_within_one_determined": {
            k: (v[1] / np.maximum(v[2], 1)).round(4).tolist() for k, v in det_fields.items() if k in near
        },
        "position_error": (err_sum / np.maximum(err_n, 1)).round(3).tolist(),
    }


def score_counterfactuals(
    domain: Any, episodes: Sequence[Episode], forecasts: dict[str, Sequence[Sequence[str]]]
) -> dict[str, Any]:
    """Per held action: exact rate, the controlled object's exact rate and its direction agreement, by horizon."""
    key = domain.controlled
    out: dict[str, Any] = {}
    for name, preds in forecasts.items():
        H = len(preds[0])
        exact, obj, direction = np.zeros(H), np.zeros(H), np.zeros(H)
        for ep, pred in zip(episodes, preds, strict=True):
            truth = ep.futures[name][1]
            start = (_fields(domain, ep.history[-1]) or {}).get(key)
            for h in range(H):
                exact[h] += domain.spell(pred[h]) == domain.spell(truth[h])
                t, p = _fields(domain, truth[h]) or {}, _fields(domain, pred[h]) or {}
                obj[h] += t.get(key) is not None and p.get(key) == t.get(key)
                if start is not None and t.get(key) is not None and p.get(key) is not None:
                    direction[h] += np.sign(p[key] - start) == np.sign(t[key] - start)
        n = len(episodes)
        out[name] = {
            "exact": (exact / n).round(4).tolist(),
            "controlled_exact": (obj / n).round(4).tolist(),
            "controlled_direction": (direction / n).round(4).tolist(),
        }
    return out


def forecast_all(
    predict: Callable[[list[list[str]], int, list[list[str | None]]], list[list[str]]],
    episodes: Sequence[Episode],
    names: Sequence[str],
    horizon: int,
    batch: int = 256,
) -> dict[str, list[list[str]]]:
    """Each sequence's forecast for every episode: predict(histories, k, actions) in batches."""
    rows = [(name, ep) for name in names for ep in episodes]
    preds: list[list[str]] = []
    for i in range(0, len(rows), batch):
        part = rows[i : i + batch]
        histories = [ep.history for _, ep in part]
        actions: list[list[str | None]] = [
            list[str | None]([*ep.actions, *ep.futures[name][0]][: len(ep.history) + horizon - 1])
            for name, ep in part
        ]
        preds += predict(histories, horizon, actions)
    return {name: preds[j * len(episodes) : (j + 1) * len(episodes)] for j, name in enumerate(names)}


def evaluate_actions(
    predictor: Any,
    domain: Any,
    episodes: int = 200,
    horizon: int = 16,
    seed: int = 0,
    sticky: float = 0.0,
    baseline: Any | None = None,
    quantum: int = 4,
    policy: str = "mix",
    variants: int = 256,
) -> dict[str, Any]:
    """Every number above for `predictor` (a pipeline.predictor.Predictor with actions) on `episodes` test
    episodes of `domain` played by its behaviour `policy`; `baseline`, another such predictor (the 1-D model), is
    scored beside it. `variants`: as record_episodes'."""
    eps = record_episodes(
        domain, episodes, predictor.T, horizon, seed=seed, sticky=sticky, policy=policy, variants=variants
    )
    names = list(eps[0].futures)

    def model(p: Any) -> Callable[[list[list[str]], int, list[list[str | None]]], list[list[str]]]:
        return lambda h, k, a: p.predict_under(h, k, a)[0]

    t1 = time.perf_counter()
    ours = forecast_all(model(predictor), eps, names, horizon)
    t_predict = time.perf_counter() - t1
    logged = {
        "semworld": score_forecasts(domain, eps, ours["logged"], quantum),
        "copy-last": score_forecasts(domain, eps, [[ep.history[-1]] * horizon for ep in eps], quantum),
        "constant velocity": score_forecasts(
            domain,
            eps,
            [[constant_velocity(ep.history, h + 1) for h in range(horizon)] for ep in eps],
            quantum,
        ),
    }
    if baseline is not None:
        logged["1-D baseline"] = score_forecasts(domain, eps, forecast_all(model(baseline), eps, ["logged"],
                                                 horizon)["logged"], quantum)  # fmt: skip
    states = len(names) * len(eps) * horizon
    return {
        "domain": domain.name,
        "episodes": len(eps),
        "horizon": horizon,
        "history": predictor.T,
        "sticky": sticky,
        "seed": seed,
        "policy": policy,
        "variants": variants if any(ep.hidden for ep in eps) else 0,  # 0 where no episode was tested
        "logged": logged,
        "counterfactual": score_counterfactuals(domain, eps, {n: ours[n] for n in names if n != "logged"}),
        "predicted_states_per_s": round(states / max(t_predict, 1e-9), 1),
    }


def plot_horizons(result: dict[str, Any], path: str | Path) -> Path:
    """Exact match by horizon: each method under the logged actions, and the model under each held action."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    H = result["horizon"]
    hs = np.arange(1, H + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for name, r in result["logged"].items():
        a.plot(hs, r["exact"], marker="o", ms=3, label=name)
    a.plot(
        hs,
        result["logged"]["semworld"]["exact_determined"],
        ls="--",
        color="C0",
        label="semworld, determined targets",
    )
    a.set(
        title=f"{result['domain']}: logged actions",
        xlabel="horizon (steps of 4 frames)",
        ylabel="exact state",
    )
    a.legend(fontsize=8)
    for i, (name, r) in enumerate(result["counterfactual"].items()):
        b.plot(hs, r["exact"], marker="o", ms=3, color=f"C{i}", label=f"{name}: whole state")
        b.plot(hs, r["controlled_exact"], ls=":", color=f"C{i}", label=f"{name}: the object it moves")
    b.set(title="semworld under held actions", xlabel="horizon (steps of 4 frames)")
    b.legend(fontsize=7)
    a.set_ylim(0, 1.02)
    a.set_xticks(hs[:: max(1, H // 8)])
    b.set_xticks(hs[:: max(1, H // 8)])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
