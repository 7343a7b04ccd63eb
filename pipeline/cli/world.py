"""`semworld world generate|show`: write seeded clips of the built-in world, or render one state to a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.utils import UserError


def register(sub: argparse._SubParsersAction) -> None:
    """Add `world generate` and `world show` to the CLI."""
    p = sub.add_parser("world", help="the built-in physical world: generate clips, render states")
    wsub = p.add_subparsers(dest="world_command", metavar="ACTION")

    def usage(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=usage)

    what = "DIR/clips/*.mp4, DIR/frames/<clip>/<k>.png and DIR/states.jsonl (same arguments, same bytes)"
    g = wsub.add_parser("generate", help="write MP4 clips, PNG frames at the state instants and states.jsonl",
                        description=f"Write seeded clips of the built-in world: {what}.")  # fmt: skip
    g.add_argument(
        "--scenario", default="all",
        help="scenario names, comma-separated (or a family, or 'all', the default)"
    )
    g.add_argument("--clips", type=int, required=True, help="number of clips")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--out", type=Path, required=True, help="output folder")
    g.add_argument("--split", default="train", help="train, val or test: each draws from its own seeds (default %(default)s)")
    g.add_argument("--length", type=int, default=12, help="states per clip (default 12)")
    g.add_argument("--size", type=int, default=128, help="frame side in pixels (default 128)")
    g.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    g.set_defaults(func=_generate)

    s = wsub.add_parser("show", help="render a state sentence to a PNG")
    s.add_argument("state", help='a state, e.g. "red ball top left , lamp on ."')
    s.add_argument("--out", type=Path, required=True, help="PNG file to write")
    s.add_argument("--size", type=int, default=128, help="frame side in pixels (default 128)")
    s.set_defaults(func=_show)


def _generate(args: argparse.Namespace) -> int:
    from world.video import generate  # imported here so `semworld --help` stays quick

    options = {name: getattr(args, name) for name in ("clips", "seed", "split", "length", "size", "workers")}
    path = generate(args.out, args.scenario, **options, progress=not (args.no_progress or args.quiet))
    print(f"wrote {args.clips} clip{'' if args.clips == 1 else 's'} of {args.scenario} to {args.out}, states in {path}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from world import render_state
    from world.video import save_png

    frame = render_state(args.state, size=args.size)
    out: Path = args.out
    if out.suffix.lower() != ".png":
        raise UserError(f"--out {out}: expected a .png file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save_png(frame, out)
    except OSError as err:
        raise UserError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    print(f"wrote {out}")
    return 0
