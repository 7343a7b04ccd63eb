"""The `semworld` command line: one argparse tree, each command group registered by its own module."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import os
import sys

from pipeline.utils import UserError

# Each module exposes `register(subparsers)` and sets `func` on the parsers it adds.
COMMAND_MODULES = (
    "pipeline.cli.presets",
    "pipeline.cli.world",
    "pipeline.cli.train",
    "pipeline.cli.eval",
    "pipeline.cli.demo",
    "pipeline.cli.predict",
    "pipeline.cli.plan",
    "pipeline.cli.batch",
)


# semworld's own packages: their INFO lines are the command's progress. Other libraries speak up from WARNING on
# (matplotlib's "generated new fontManager", Ray's start-up notes), unless --verbose asks for everything.
OWN_LOGGERS = ("pipeline", "models", "world", "api")


def own_info_or_warning(record: logging.LogRecord) -> bool:
    """A handler filter: semworld's records at every level the logger passes, other libraries' from WARNING."""
    return record.levelno >= logging.WARNING or record.name.split(".", 1)[0] in OWN_LOGGERS


class UserFormatter(logging.Formatter):
    """What a user reads: the message alone, "warning: ..." / "error: ..." before the ones that need a look."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {message}"
        return message


DESCRIPTION = (
    "semworld, a video world model that thinks in words: it reads a clip as short sentences (states), forecasts "
    "the next ones with a 4-tensor attention predictor and draws them with a diffusion renderer. Start with "
    "`semworld predict CLIP --out DIR`; `semworld COMMAND --help` tells what each command does."
)


def version() -> str:
    """The installed package's version (its metadata), or what to do when semworld runs uninstalled."""
    try:
        return importlib.metadata.version("semworld")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="semworld", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"semworld {version()}")
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument(
        "-v", "--verbose", action="store_true", help="log at DEBUG level, with times and sources"
    )
    loud.add_argument(
        "-q", "--quiet", action="store_true", help="only warnings and errors (and the command's own result)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def one_line(err: Exception) -> str:
    """An error as one line: a settings validation error (SEMWORLD_* variables) names each field and its problem."""
    from pydantic import ValidationError

    if not isinstance(err, ValidationError):
        return str(err)
    problems = []
    for e in err.errors():
        where = ".".join(str(x) for x in e.get("loc", ()))
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{where}: {msg}" if where else msg)
    return f"{err.title}: " + "; ".join(problems)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        if args.verbose
        else UserFormatter()
    )
    if not args.verbose:
        handler.addFilter(own_info_or_warning)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
        handlers=[handler],
    )
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except (UserError, ValueError, OSError) as err:  # UserError first: the family every check raises
        # One line for the user; SEMWORLD_DEBUG=1 shows the traceback for developers.
        if os.environ.get("SEMWORLD_DEBUG"):
            raise
        print(f"semworld: error: {one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("semworld: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)
