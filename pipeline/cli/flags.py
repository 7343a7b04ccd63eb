"""Argparse flags from declared fields, and the parsed flags back into the declaration: one way for both kinds of
declaration the commands have, an arguments dataclass (`train`) and a pydantic model (the call parameters of
`predict` and `batch`, pipeline.params.ForecastParams).

Every field `some_name` becomes `--some-name` with the field's type and default; a field without a default is a
required flag; a bool becomes `--x / --no-x`; a `tuple[...]` takes one or more values; a nested dataclass field
(a model config) adds its own fields as flags. An optional one (`x: Config | None`) is switched on by `--x / --no-x`
and hands the owner a dict of its flags' values, or None: its fields without a default are the owner's to fill in
(a width taken from another argument). Help text is the field's description: for a dataclass, its line in the
class docstring; for a pydantic model, the field's `description`, whose limits the model checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline.utils import UserError

if TYPE_CHECKING:
    from pydantic import BaseModel

T = TypeVar("T")

# "name: text", "name / other: text" or "name, other: text" at the start of a docstring line.
_DOC_LINE = re.compile(r"^\s*((?:\w+)(?:\s*(?:/|,)\s*\w+)*)\s*:\s*(.+)$")


def field_docs(cls: type) -> dict[str, str]:
    """{field: its whole description} from the docstrings of `cls` and its bases (a field described in several:
    the most derived class's words), each written as 'name: text' lines continued by the more deeply indented
    lines under it (a help text cut at the end of its first line would stop mid-sentence)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs |= _docstring_fields(klass.__doc__ or "")
    return docs


def _docstring_fields(doc: str) -> dict[str, str]:
    docs: dict[str, str] = {}
    names: list[str] = []  # the fields of the description being read
    indent = 0
    for line in doc.splitlines():
        depth = len(line) - len(line.lstrip())
        if names and line.strip() and depth > indent:
            for name in names:
                docs[name] += " " + line.strip()
            continue
        match = _DOC_LINE.match(line)
        names = []
        if match:
            indent = depth
            for name in re.split(r"\s*[/,]\s*", match.group(1)):
                if name not in docs:
                    docs[name] = match.group(2).strip()
                    names.append(name)
    return docs


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def flag_name(name: str) -> str:
    """The flag of a field: `some_name` -> `--some-name`."""
    return "--" + name.replace("_", "-")


def _switched(hint: Any) -> bool:
    """Whether a field typed `hint` is an optional nested dataclass (`Config | None`), switched on by a flag."""
    tp = _unwrap_optional(hint)
    return tp is not hint and dataclasses.is_dataclass(tp)


def add_field_flag(
    parser: argparse.ArgumentParser | argparse._ActionsContainer,
    name: str,
    tp: Any,
    default: Any,
    help: str,
    *,
    required: bool = False,
    flags: tuple[str, ...] = (),
    **options: Any,
) -> None:
    """The flag of one field `name` of type `tp` (`X | None` reads as X): `flags` (default `--name`), its value
    in `args.name`; a bool is `--x / --no-x`, a tuple one or more values; `options` go to add_argument as they are
    (choices, metavar)."""
    tp = _unwrap_optional(tp)
    kwargs: dict[str, Any] = {"dest": name, "help": help}
    if required:
        kwargs["required"] = True
    else:
        kwargs["default"] = list(default) if isinstance(default, tuple) else default
    if tp is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(tp) is tuple:
        kwargs["type"] = typing.get_args(tp)[0]
        kwargs["nargs"] = "+"
    else:
        kwargs["type"] = tp
    parser.add_argument(*(flags or (flag_name(name),)), **kwargs, **options)


def add_dataclass_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    flags: Mapping[str, str] | None = None,
    choices: Mapping[str, tuple[str, ...]] | None = None,
    help: Mapping[str, str] | None = None,
    _owner_fills: bool = False,
) -> None:
    """Add one flag per field of the dataclass `cls` (and of any nested dataclass field) to `parser`.

    flags: another spelling for a field's flag ({"data_format": "--format"}). choices: allowed values.
    help: help text that replaces the docstring's line.
    """
    hints = typing.get_type_hints(cls)
    docs = {**field_docs(cls), **(help or {})}
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or not f.init:
            continue
        tp = _unwrap_optional(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and _owner_fills:
            continue  # the owner of the optional config fills it in
        nested, switched = tp, _switched(hints[f.name])
        if dataclasses.is_dataclass(tp) and not switched:
            add_dataclass_flags(parser, tp, flags=flags, choices=choices, help=help)  # type: ignore[arg-type]
            continue
        factory: Any = f.default_factory
        default = None if required else (f.default if f.default is not dataclasses.MISSING else factory())
        if switched:  # the switch --x / --no-x, on when the default is a config; its fields' flags follow
            tp, default = bool, default is not None
        # argparse %-formats help text: a literal % from a docstring ("l % n == 0") must be doubled
        text = docs.get(f.name, "").replace("%", "%%")
        options: dict[str, Any] = {"choices": choices[f.name]} if choices and f.name in choices else {}
        spelled = (flags[f.name],) if flags and f.name in flags else ()
        add_field_flag(parser, f.name, tp, default, text if required else text + " (default: %(default)s)",
                       required=required, flags=spelled, **options)  # fmt: skip
        if switched:
            add_dataclass_flags(parser, nested, flags=flags, choices=choices, help=help, _owner_fills=True)


def _values(cls: type, ns: argparse.Namespace) -> dict[str, Any]:
    """{field: value} of the flags `add_dataclass_flags(parser, cls)` added (fields without a flag left out)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name.startswith("_") or not f.init:
            continue
        tp = _unwrap_optional(hints[f.name])
        if _switched(hints[f.name]):
            values[f.name] = _values(tp, ns) if getattr(ns, f.name) else None
        elif dataclasses.is_dataclass(tp):
            values[f.name] = dataclass_from_namespace(tp, ns)  # type: ignore[arg-type]
        elif hasattr(ns, f.name):
            value = getattr(ns, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return values


def dataclass_from_namespace(cls: type[T], ns: argparse.Namespace) -> T:
    """The `cls` instance that flags added by `add_dataclass_flags(parser, cls)` describe."""
    return cls(**_values(cls, ns))


def add_pydantic_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    *,
    flags: Mapping[str, tuple[str, ...]] | None = None,
    metavars: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    exclusive: Collection[str] = (),
) -> None:
    """Add one flag per field of the pydantic `model` to `parser`, with the field's type and default; its help is
    the field's description, then "(default D)" (or the words `defaults` gives the field) and "; " + `extra`'s
    words for it. The values are not checked here: the model checks them (`check_pydantic_flags`).

    flags: the field's flag and its aliases ({"horizon": ("--horizon", "-k")}). metavars: the value's name in
    the help. exclusive: fields whose flags exclude each other (one mutually exclusive group).
    """
    group = parser.add_mutually_exclusive_group() if exclusive else None
    for name, field in model.model_fields.items():
        said = (defaults or {}).get(name, f"default {field.default}" if field.default is not None else "")
        more = f"; {extra[name]}" if extra and name in extra else ""
        text = f"{field.description} ({said}){more}" if said else f"{field.description}{more}"
        where = group if group is not None and name in exclusive else parser
        add_field_flag(where, name, field.annotation, field.default, text, flags=(flags or {}).get(name, ()),
                       metavar=(metavars or {}).get(name))  # fmt: skip


def check_pydantic_flags(
    ns: argparse.Namespace,
    model: type[BaseModel],
    check: Callable[..., Any],
    flags: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """The values of `model`'s flags checked by `check(**values)` (which raises a ValueError "FIELD: why" or one
    that names no field), before anything is read or loaded: a UserError that names the flag instead ("--state-rate:
    Input should be less than or equal to 240, got 500.0")."""
    try:
        check(**{name: getattr(ns, name) for name in model.model_fields})
    except ValueError as err:
        name, sep, rest = str(err).partition(": ")
        if sep and name in model.model_fields:
            raise UserError(f"{(flags or {}).get(name, (flag_name(name),))[0]}: {rest}") from None
        raise UserError(str(err)) from None


def add_command(
    sub: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """Add the subcommand `name`, run by `run`, whose docstring is its help: the first paragraph is its line in the
    parent's list (lower case, without the period, as argparse's own lines are), the whole its --help
    description. So a command's handler and its help text say what it does once."""
    doc = inspect.getdoc(run)
    if not doc:
        raise ValueError(f"{run.__qualname__} has no docstring to describe `{name}` with")
    summary = " ".join(doc.split("\n\n")[0].split()).rstrip(".").replace("%", "%%")  # argparse %-formats help
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary[:1].lower() + summary[1:], description=doc
    )
    parser.set_defaults(func=run)
    return parser


def add_result_flags(parser: argparse.ArgumentParser) -> None:
    """--threads, --out and --json of a command that scores something and prints or writes its result."""
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    parser.add_argument("--out", default=None, help="also write the result as JSON to this file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def emit_result(
    ns: argparse.Namespace,
    result: dict[str, Any],
    print_report: Callable[[], None],
    then_write: Callable[[], None] | None = None,
) -> int:
    """The result of a command with add_result_flags: written to --out (atomic JSON) when given, then
    `then_write` (the command's other files, once the result is safe), then printed as one JSON object (--json)
    or by `print_report`. Returns the exit status, 0."""
    import json

    from pipeline.utils import atomic_write_json

    if ns.out:
        atomic_write_json(ns.out, result)
    if then_write is not None:
        then_write()
    if ns.json:
        print(json.dumps(result))
    else:
        print_report()
    return 0


def sticky_probability(text: str) -> float:
    """argparse type of --sticky: a probability in [0, 1) (at 1 the console would never take a new action)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a probability in [0, 1)")
    return value


def add_sticky_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: float | None = 0.0
) -> None:
    """--sticky, the emulator's sticky-action probability (Machado et al. 2018: each frame, the console repeats
    its previous action with this probability, so the action executed can differ from the one logged)."""
    parser.add_argument(
        "--sticky",
        type=sticky_probability,
        default=default,
        help="a domain with actions (Atari): the probability that the console repeats its previous action each "
        "frame (default 0; 0.25 is the protocol for evaluating agents)",
    )


def check_policy(domain: Any, policy: str | None, default: Collection[str] = ()) -> None:
    """--policy against the domain's behaviour policies (`default` for a domain that names none; none at all:
    anything goes): a UserError naming them, before any work. None (not given) passes."""
    policies = getattr(domain, "policies", None) or default
    if policy is not None and policies and policy not in policies:
        raise UserError(f"--policy must be one of {', '.join(policies)} for {domain.name}, got {policy!r}")
