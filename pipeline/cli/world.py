"""`semworld world generate|show`: write seeded clips of a domain that records data sets (the built-in shapes
world by default), or draw one state to a PNG; `semworld domains`: the domains this installation knows."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.flags import add_command, add_sticky_flag, check_policy
from pipeline.utils import UserError


def register(sub: argparse._SubParsersAction) -> None:
    """Add `world generate` and `world show` to the CLI."""
    p = sub.add_parser("world", help="a domain's data: generate clips with true states, draw states (default: "
                       "the built-in shapes world)")  # fmt: skip
    wsub = p.add_subparsers(dest="world_command", metavar="ACTION")

    def usage(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=usage)

    g = add_command(wsub, "generate", _generate)
    g.add_argument("--domain", default="shapes", help="the domain to record (default: shapes; `semworld domains` "
                   "lists them)")  # fmt: skip
    g.add_argument(
        "--scenario",
        default="all",
        help="scenario names, comma-separated (or a family, or 'all', the default)",
    )
    g.add_argument("--clips", type=int, required=True, help="number of clips")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--out", type=Path, required=True, help="output folder")
    g.add_argument(
        "--split",
        default="train",
        help="train, val or test: each draws from its own seeds (default %(default)s)",
    )
    g.add_argument("--length", type=int, default=12, help="states per clip (default 12)")
    g.add_argument("--size", type=int, default=128, help="frame side in pixels (default 128)")
    g.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    g.add_argument(
        "--policy",
        help="a domain with actions (Atari): the behaviour policy, one of the domain's policies (Atari: random "
        "play, tracking: the game's scripted player, mix: a per-clip mix of the two, the default, or runs: the "
        "mix with each random action held for a run of steps)",
    )
    add_sticky_flag(g, default=None)
    g.add_argument("--warmup", type=int, default=None, metavar="STEPS", help="a domain with actions (Atari): the "
                   "most steps played before each clip, drawn per clip (default: the game's, 1500 for Pong, 500 for "
                   "Freeway; a whole Freeway game is 2048)")  # fmt: skip
    g.add_argument("--score-max", type=int, default=None, metavar="N", help="a game whose score can be set "
                   "(Pong: the player's, 0..20; Freeway: 0..99): each clip starts at a score drawn from 0..N, which the screen "
                   "shows (scores play seldom reaches, for a captioner to learn)")  # fmt: skip
    g.add_argument(
        "--no-video",
        action="store_true",
        help="a domain with actions (Atari): states.jsonl only, no MP4 clips (training corpora)",
    )
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    s = add_command(wsub, "show", _show)
    s.add_argument("--domain", default="shapes", help="the domain the state is written in (default: shapes)")
    s.add_argument("state", help='a state, e.g. "red ball top left , lamp on ."')
    s.add_argument("--out", type=Path, required=True, help="PNG file to write")
    s.add_argument("--size", type=int, default=128, help="frame side in pixels (default 128)")
    register_domains(sub)


def register_domains(sub: argparse._SubParsersAction) -> None:
    """Add `domains`: every domain name the registry resolves, with what each gives."""
    add_command(sub, "domains", _domains)


def _domains(args: argparse.Namespace) -> int:
    """List the domains (state languages) this installation knows.

    The domains a weights folder's model_index.json may name ("domain"), with what each gives: a grammar, a
    projection, a mirror, actions, sample clips, a data set generator."""
    from pipeline.domain import can_generate, get_domain, known_domains

    for name in known_domains():
        d = get_domain(name)
        has = [what for what, yes in (("grammar", d.vocabulary is not None), ("projection", d.max_tokens is not None
               and d.automaton(d.max_tokens) is not None), ("mirror", bool(d.mirror)), ("actions", bool(d.actions)),
               ("samples", bool(d.sample_clips())), ("generate", can_generate(d))) if yes]  # fmt: skip
        print(f"{name:10s} {d.description}" + (f" [{', '.join(has)}]" if has else ""))
    return 0


def _generate(args: argparse.Namespace) -> int:
    """Write MP4 clips, PNG frames at the state instants and states.jsonl.

    Seeded clips of a domain (the built-in shapes world unless --domain says otherwise): DIR/clips/*.mp4,
    DIR/frames/<clip>/<k>.png and DIR/states.jsonl (same arguments, same bytes)."""
    from pipeline.domain import can_generate, get_domain

    domain = get_domain(args.domain)
    if not can_generate(domain):
        raise UserError(
            f"--domain {args.domain}: the {args.domain} domain records no data sets (it has no generator)"
        )
    options = {name: getattr(args, name) for name in ("clips", "seed", "split", "length", "size", "workers")}
    if args.scenario != "all":  # a domain's own option (the shapes world's scenarios); "all" is its default
        options["scenario"] = args.scenario
    # the recorders of domains with actions (Atari): only what the user gave, so other domains never see them
    given_options = (("policy", args.policy), ("sticky", args.sticky), ("warmup", args.warmup),
                     ("score_max", args.score_max))  # fmt: skip
    options.update({k: v for k, v in given_options if v is not None})
    if args.no_video:
        options["video"] = False
    given = [
        f"--{k.replace('_', '-')}"
        for k in ("policy", "sticky", "warmup", "score_max", "no_video")
        if getattr(args, k) not in (None, False)
    ]
    if given and not domain.actions:
        raise UserError(
            f"{given[0]}: the {domain.name} domain has no actions (the option is for game recorders)"
        )
    check_policy(domain, args.policy)
    path = domain.generate(args.out, **options, progress=not (args.no_progress or args.quiet))  # type: ignore[attr-defined]
    what = args.scenario if args.domain in ("shapes", "world") else args.domain
    print(
        f"wrote {args.clips} clip{'' if args.clips == 1 else 's'} of {what} to {args.out}, states in {path}"
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    """Draw a state sentence as the domain's true frame, to a PNG."""
    from pipeline.domain import get_domain
    from pipeline.outputs import png_bytes

    domain = get_domain(args.domain)
    frame = domain.draw(args.state, args.size)
    if frame is None:
        raise UserError(f"--domain {args.domain}: the {args.domain} domain cannot draw a state")
    out: Path = args.out
    if out.suffix.lower() != ".png":
        raise UserError(f"--out {out}: expected a .png file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(png_bytes(frame))
    except OSError as err:
        raise UserError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    print(f"wrote {out}")
    return 0
