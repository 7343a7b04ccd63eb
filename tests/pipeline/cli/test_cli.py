"""The CLI skeleton: help, unknown commands, and one-line errors."""

import pytest

from pipeline import cli
from pipeline.utils import UserError


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert "semworld" in capsys.readouterr().out


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
