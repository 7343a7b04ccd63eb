"""The CLI skeleton: help, unknown commands, and one-line errors."""

import argparse

import pytest

from pipeline import cli
from pipeline.utils import UserError


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("predict", "batch", "serve", "train", "eval", "world", "domains", "presets", "demo"):
        assert f"\n    {command} " in out, command  # every command module registered its commands


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for every subcommand at every depth."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaf_parsers(child, (*path, name))


def test_every_subcommand_help_renders():
    # argparse %-formats help strings, so one stray "%" in a docstring line made `train predictor --help` crash
    leaves = list(_leaf_parsers(cli.build_parser()))
    assert len(leaves) > 10
    for path, parser in leaves:
        text = parser.format_help()
        assert text.startswith("usage: semworld " + " ".join(path)), path
    predictor = dict(leaves)[("train", "predictor")].format_help()
    assert "l % n == 0" in predictor


def test_user_error_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)
    parser = cli.build_parser()

    def boom(args):
        raise UserError("--data /nope: no such file")

    sub = parser._subparsers._group_actions[0]
    p = sub.add_parser("boom")
    p.set_defaults(func=boom)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "semworld: error: --data /nope: no such file"
