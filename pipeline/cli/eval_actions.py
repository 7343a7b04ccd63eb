"""`semworld eval actions`: a predictor with actions against its domain's simulator (the Atari emulator), under
the logged actions and counterfactual ones; the scoring lives in pipeline.evaluation.actions."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.cli.flags import add_command, add_result_flags, add_sticky_flag, check_policy, emit_result
from pipeline.utils import UserError


def add_actions_parser(eval_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `eval actions`."""
    p = add_command(eval_subparsers, "actions", run_eval_actions)
    add_game_weights_flags(p, baseline="another predictor folder (the 1-D baseline) scored beside")
    p.add_argument("--episodes", type=int, default=200, help="test episodes (default %(default)s)")
    p.add_argument("--horizon", type=int, default=16, help="forecast steps (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="test episode seed (default %(default)s)")
    add_sticky_flag(p)
    p.add_argument("--policy", default="mix", help="the behaviour policy that plays the episodes' histories and "
                   "logged futures (Atari: mix, random, tracking, or runs, whose random actions are held for a "
                   "while; default %(default)s)")  # fmt: skip
    p.add_argument("--variants", type=int, default=256, help="consoles per episode that read as its history but "
                   "hold positions elsewhere in their bins, to find the targets the history does not determine "
                   "(0: only serves count as not determined; default %(default)s)")  # fmt: skip
    p.add_argument("--figure", default=None, help="write the horizon plot to this PNG")
    add_result_flags(p)
    return p


def add_game_weights_flags(p: argparse.ArgumentParser, baseline: str) -> None:
    """--weights (a game's weights folder, or a predictor folder), --domain (for the latter) and --baseline (a
    second predictor folder, what `baseline` says it does)."""
    p.add_argument("--weights", required=True, help="a weights folder (model_index.json naming its domain and "
                   "predictor, e.g. weights/pong) or a predictor folder with --domain")  # fmt: skip
    p.add_argument("--domain", default=None, help="the domain, when --weights is a predictor folder")
    p.add_argument("--baseline", default=None, help=baseline)


def load_predictor_with_domain(weights: str, domain: str | None) -> tuple[Any, Any]:
    """(Predictor, Domain) of a weights folder (its index names both) or a predictor folder and --domain."""
    from pipeline.domain import domain_of_index, get_domain
    from pipeline.loading import stage_folders
    from pipeline.predictor import Predictor

    if (Path(weights) / "model_index.json").is_file():
        folders, index = stage_folders(weights, stages=("predictor",))
        dom = get_domain(domain) if domain else domain_of_index(index, Path(weights) / "model_index.json")
        return Predictor.from_pretrained(folders["predictor"], domain=dom), dom
    if domain is None:
        raise UserError(f"--weights {weights}: no model_index.json; name the domain with --domain")
    dom = get_domain(domain)
    return Predictor.from_pretrained(weights, domain=dom), dom


def run_eval_actions(ns: argparse.Namespace) -> int:
    """Score a predictor with actions in its domain's emulator (Atari), under logged and held actions.

    Forecast held-out test episodes of the domain's emulator from T true states and actions, under the logged
    actions and under each action held throughout; every forecast state is compared with the emulator's.
    Copy-last and constant-velocity references (and --baseline) read the same histories. A target the history
    and the actions do not determine (a serve before it, or a step where a console that reads alike through the
    history, its positions elsewhere in their bins, goes on otherwise: --variants) is also scored apart."""
    from pipeline.evaluation.actions import evaluate_actions, plot_horizons
    from pipeline.placement import set_threads
    from pipeline.predictor import Predictor

    if ns.episodes < 1 or ns.horizon < 1:
        raise UserError("--episodes and --horizon must be >= 1")
    if ns.seed < 0 or ns.variants < 0:
        raise UserError(f"--seed and --variants must be >= 0, got {ns.seed} and {ns.variants}")
    set_threads(ns.threads)
    predictor, domain = load_predictor_with_domain(ns.weights, ns.domain)
    if not predictor.actions:
        raise UserError(f"--weights {ns.weights}: this predictor forecasts from states alone (no actions)")
    if not callable(getattr(domain, "simulator", None)):
        raise UserError(f"the {domain.name} domain has no simulator to score against")
    check_policy(domain, ns.policy, default=("mix",))
    baseline = Predictor.from_pretrained(ns.baseline, domain=domain) if ns.baseline else None
    result = evaluate_actions(
        predictor, domain, ns.episodes, ns.horizon, ns.seed, ns.sticky, baseline, policy=ns.policy,
        variants=ns.variants,
    )  # fmt: skip
    if ns.figure:
        plot_horizons(result, ns.figure)
    return emit_result(ns, result, lambda: print(format_report(result)))


def format_report(result: dict[str, Any]) -> str:
    """The tables as Markdown: exact state by horizon per method, fields at h = 1 and 8, held actions."""
    H = result["horizon"]
    shown = [h for h in (1, 2, 4, 8, 12, 16) if h <= H]
    head = "| method | " + " | ".join(f"h={h}" for h in shown) + " |\n|---|" + "---|" * len(shown) + "\n"
    lines = [f"{result['domain']}: {result['episodes']} test episodes, history {result['history']} states, "
             f"sticky {result['sticky']}, policy {result['policy']}", "", "Exact next state under the logged actions:", "", head.rstrip()]  # fmt: skip
    sem = result["logged"]["semworld"]
    rows = [
        *result["logged"].items(),
        ("semworld, the targets the history and the actions determine", {"exact": sem["exact_determined"]}),
        ("(share not determined: a serve, a hidden position)", {"exact": sem["undetermined_share"]}),
        ("(share not determined through a hidden position)", {"exact": sem["hidden_share"]}),
    ]
    for name, r in rows:
        lines.append(f"| {name} | " + " | ".join(f"{r['exact'][h - 1]:.3f}" for h in shown) + " |")
    lines += ["", "semworld per field (h=1 / h=8), all targets; then the determined targets alone; and mean position "
              "error in RAM units:", ""]  # fmt: skip
    h8 = min(8, H) - 1

    def pair(rates: list[float]) -> str:
        return f"{rates[0]:.3f} / {rates[h8]:.3f}"

    near, det, det_near = (
        sem[k] for k in ("fields_within_one", "fields_determined", "fields_within_one_determined")
    )
    for k, v in sem["fields"].items():
        line = f"- {k}: {pair(v)}" + (f" (within one step: {pair(near[k])})" if k in near else "")
        if k in det:
            line += f"; determined: {pair(det[k])}"
            line += f" (within one step: {pair(det_near[k])})" if k in det_near else ""
        lines.append(line)
    lines.append(f"- position error: {sem['position_error'][0]:.2f} / {sem['position_error'][h8]:.2f} "
                 f"(copy-last {result['logged']['copy-last']['position_error'][h8]:.2f}, constant velocity "
                 f"{result['logged']['constant velocity']['position_error'][h8]:.2f} at h={h8 + 1})")  # fmt: skip
    lines += [
        "",
        "Under held actions (state exact / controlled object exact / its direction right):",
        "",
        head.rstrip(),
    ]
    for name, r in result["counterfactual"].items():
        lines.append(f"| {name} | " + " | ".join(f"{r['exact'][h - 1]:.3f} / {r['controlled_exact'][h - 1]:.3f} / "
                                                 f"{r['controlled_direction'][h - 1]:.3f}" for h in shown) + " |")  # fmt: skip
    lines += ["", f"predictor: {result['predicted_states_per_s']} states/s under actions (batches of 256)"]
    return "\n".join(lines)
