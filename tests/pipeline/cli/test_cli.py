"""The CLI skeleton: help, unknown commands, and one-line errors."""

import argparse
import re

import pytest

from pipeline import cli
from pipeline.cli.flags import add_command
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


def test_a_command_is_described_by_its_handlers_docstring():
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers()

    def run(ns: argparse.Namespace) -> int:
        """Draw 50% of the frames.

        Every other frame of the clip, the rest left out."""
        return 0

    command = add_command(sub, "draw", run)
    assert command.get_default("func") is run
    assert "draw 50% of the frames\n" in parser.format_help()  # its line in the list: lower case, no period
    assert (
        "Draw 50% of the frames. Every other frame of the clip, the rest left out." in command.format_help()
    )

    def undocumented(ns: argparse.Namespace) -> int:
        return 0

    with pytest.raises(ValueError, match="no docstring"):
        add_command(sub, "bare", undocumented)


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


def _all_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for the top level and every command and subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _all_parsers(child, (*path, name))


def test_version_comes_from_the_installed_package(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"semworld {version('semworld')}\n"


# What a user cannot look up: issue numbers, a paper's section without its name, the names of runs and of the
# tensor memory's seed code, and code-level registries.
INTERNAL = re.compile(r"\bissue\s*#?\d|(?<!paper's )\bsection \d|\bthe seed\b|\bseed's\b|\brun [A-Z]\d|\bT8[A-Z]\b|RECIPES\[",
                      re.IGNORECASE)  # fmt: skip


def test_no_help_text_refers_to_what_a_user_cannot_look_up():
    for path, parser in _all_parsers(cli.build_parser()):
        text = " ".join(parser.format_help().split())  # unwrapped: a reference may straddle a line break
        assert not INTERNAL.findall(text), (path, INTERNAL.findall(text))


def test_every_option_says_what_it_does_and_its_default():
    skip = (argparse._HelpAction, argparse._VersionAction, argparse._StoreTrueAction, argparse._StoreFalseAction,
            argparse.BooleanOptionalAction)  # fmt: skip
    for path, parser in _leaf_parsers(cli.build_parser()):
        for action in parser._actions:
            if not action.option_strings or isinstance(action, skip):
                continue
            assert action.help, (path, action.option_strings)
            unset = action.default is None or action.default is False or action.default == []
            if not unset and not action.required:
                assert "default" in action.help, (path, action.option_strings, action.help)


def test_multi_line_field_descriptions_are_whole_in_the_help():
    predictor = dict(_leaf_parsers(cli.build_parser()))[("train", "predictor")].format_help()
    assert "then cosine decay to lr * min_lr_ratio at the last step of the epoch budget" in " ".join(
        predictor.split()
    )


def test_a_field_described_in_a_base_class_is_described_in_the_help():
    """The captioner and the pixel model take AdamWArgs' fields; the help describes them once, in the base, and
    shows each trainer's own default (the captioner's lr differs)."""
    parsers = dict(_leaf_parsers(cli.build_parser()))
    for name, default in (("captioner", "0.0015"), ("pixel", "0.001")):
        action = next(a for a in parsers[("train", name)]._actions if "--lr" in a.option_strings)
        assert "cosine decay to lr * min_lr_ratio" in action.help and "AdamW" in action.help, action.help
        assert action.default == float(default)
        grad_clip = next(a for a in parsers[("train", name)]._actions if "--grad-clip" in a.option_strings)
        assert "clipped to norm grad_clip" in grad_clip.help


def test_serve_shows_its_address_and_log_level_with_defaults(monkeypatch):
    monkeypatch.delenv("SEMWORLD_HOST", raising=False)
    monkeypatch.delenv("SEMWORLD_PORT", raising=False)
    serve = " ".join(dict(_leaf_parsers(cli.build_parser()))[("serve",)].format_help().split())
    assert "--host HOST address to listen on" in serve and "default 127.0.0.1" in serve
    assert "--port PORT port to listen on (SEMWORLD_PORT; default 8000)" in serve
    assert "--log-level {critical,error,warning,info,debug,trace}" in serve and "(default info)" in serve


def test_preset_flags_list_the_presets():
    from models.presets import PRESETS

    leaves = dict(_leaf_parsers(cli.build_parser()))
    for path in (("demo",), ("train", "predictor")):
        (preset,) = [a for a in leaves[path]._actions if "--preset" in a.option_strings]
        assert list(preset.choices) == list(PRESETS), path
        assert all(name in leaves[path].format_help() for name in PRESETS), path


def test_demo_help_says_what_it_runs_and_which_make_target_runs_it():
    top = " ".join(cli.build_parser().format_help().split())
    assert (
        "demo train a small 4-tensor predictor on the built-in world for about a minute, then roll it out"
        in top
    )
    demo = " ".join(dict(_leaf_parsers(cli.build_parser()))[("demo",)].format_help().split())
    assert "(what `make demo-train` runs)" in demo and "(`make demo` runs those" in demo


def test_the_call_parameter_flags_are_the_models_fields(states_file, tmp_path, capsys, monkeypatch):
    """predict's and batch's --horizon ... --guidance: type, default and description from ForecastParams (through
    pipeline.cli.flags, as train's flags come from their dataclasses), the values checked by the model before
    anything is read, the error naming the flag."""
    from pipeline.params import ForecastParams

    monkeypatch.delenv("SEMWORLD_DEBUG", raising=False)
    leaves = dict(_leaf_parsers(cli.build_parser()))
    for path in (("predict",), ("batch",)):
        actions = {a.dest: a for a in leaves[path]._actions}
        for name, field in ForecastParams.model_fields.items():
            assert actions[name].default == field.default, (path, name)
            assert actions[name].help.startswith(field.description), (path, name)
        assert actions["horizon"].option_strings == ["--horizon", "-k"] and actions["horizon"].type is int
        assert (
            actions["state_rate"].option_strings == ["--state-rate"] and actions["state_rate"].type is float
        )
        assert (
            "(default 8)" in actions["horizon"].help
            and "state_rate in model_index.json" in actions["stride"].help
        )
    capsys.readouterr()
    argv = ["predict", "--states", str(states_file), "--out", str(tmp_path / "o"), "--state-rate", "500"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "semworld: error: --state-rate: Input should be less than or equal to 240, got 500.0"
    )
