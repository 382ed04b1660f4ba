"""Typed command-line options from a task's signature (`shoal run FILE TASK --arg value`)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import enum
import inspect
import json
import re
import sys
import types
import typing
from typing import Any

from shoal.cli.parser import OneLineParser
from shoal.errors import InputError, SpecError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _strip_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def convert(text: str, tp: Any, field: str) -> Any:
    """A value of type ``tp`` from one command-line string."""
    tp = _strip_optional(tp)
    try:
        if tp is bool:
            low = text.lower()
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise ValueError("expected true or false")
        if tp in (int, float, str):
            return tp(text)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _enum_member(text, tp, field)
        if typing.get_origin(tp) is typing.Literal:
            return _literal_choice(text, typing.get_args(tp), field)
        if isinstance(tp, type) and tp.__module__ == "shoal._api.io":
            return _file_or_dir(text, tp)
        if tp is datetime.timedelta:
            return _duration(text)
        value = json.loads(text)
        if _is_record(tp):
            return _record(value, tp, field, text)
        return value
    except SpecError:  # already says what is wrong (and is a ValueError too)
        raise
    except (ValueError, TypeError, KeyError) as e:
        name = getattr(tp, "__name__", str(tp))
        examples = {int: "4", float: "0.5", bool: "true", datetime.timedelta: "90s"}
        if tp in examples:
            fix = f"pass {'an' if name[0] in 'aeiou' else 'a'} {name}, e.g. {field} {examples[tp]}"
        elif _is_record(tp):
            fix = f"pass its fields as a JSON object, e.g. {field} '{{\"name\": \"value\"}}'"
        else:
            fix = f"pass JSON for lists, dicts and dataclasses, e.g. {field} '[1, 2]'"
        raise SpecError(field, text, f"is not a valid {name} ({e})", fix) from e


_DURATION = re.compile(r"(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h|d)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(text: str) -> datetime.timedelta:
    """A ``timedelta`` from ``90``, ``90s``, ``1.5m``, ``250ms``, ``2h`` or ``1d`` (seconds
    when no unit is given)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise ValueError("expected a number of seconds, or a number and one of ms, s, m, h, d")
    return datetime.timedelta(seconds=float(m["n"]) * _UNIT_SECONDS[m["unit"] or "s"])


def _enum_member(text: str, tp: type[enum.Enum], field: str) -> enum.Enum:
    """A member by name (``RED``), or by value as written (``red``, ``2``)."""
    if text in tp.__members__:
        return tp[text]
    for member in tp:
        if str(member.value) == text:
            return member
    names = [m.name for m in tp]
    values = [str(m.value) for m in tp]
    close = difflib.get_close_matches(text, names + values, n=1)
    hint = f"did you mean {field} {close[0]}? " if close else ""
    raise SpecError(field, text, f"is not a member of {tp.__name__} (names: {', '.join(names)}; "
                    f"values: {', '.join(values)})", f"{hint}pass a name or a value")


def _choice_text(value: object) -> str:
    """A Literal value as it is typed on the command line."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)


def _literal_choice(text: str, values: tuple[object, ...], field: str) -> object:
    """The Literal value written as ``text``: a str or number as itself, an Enum member by
    name (or by value, as for an Enum parameter), a bool as true/false."""
    for value in values:
        if _choice_text(value) == text or (isinstance(value, enum.Enum)
                                           and str(value.value) == text):
            return value
    choices = [_choice_text(v) for v in values]
    close = difflib.get_close_matches(text, choices, n=1)
    hint = f"did you mean {field} {close[0]}? " if close else ""
    raise SpecError(field, text, f"is not one of the allowed values ({', '.join(choices)})",
                    f"{hint}pass one of {', '.join(choices)}")


def _is_record(tp: Any) -> bool:
    """A dataclass or a pydantic model: given as a JSON object on the command line."""
    if not isinstance(tp, type):
        return False
    if dataclasses.is_dataclass(tp):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(tp, pydantic.BaseModel)


def _record(value: object, tp: type, field: str, text: str) -> Any:
    """Nested fields typed as the task declares them, checked by the task's own codecs."""
    from shoal._storage import codecs

    if not isinstance(value, dict):
        raise SpecError(field, text, f"{tp.__name__} is given as a JSON object",
                        f"e.g. {field} '{{\"name\": \"value\"}}'")
    try:
        return codecs.decode(value, tp, blobs=None, field=field)
    except InputError as e:
        raise SpecError(e.field, e.value, e.rule.replace("the stored value", "the JSON"),
                        f"pass JSON with the fields of {tp.__name__}") from None


def _file_or_dir(text: str, tp: Any) -> Any:
    if "://" in text:
        return tp(path=text)
    return tp.from_local_sync(text)


def task_parser(task: Any) -> argparse.ArgumentParser:
    prog = f"shoal run FILE {task.short_name}"
    parser = OneLineParser(prog=prog, allow_abbrev=False, fix=_options_hint(task, prog),
                           description=(task.func.__doc__ or "").strip() or None)
    for name, param in task.signature.parameters.items():
        tp = task.hints[name]
        flags = [f"--{name}"]
        if "_" in name:
            flags.append(f"--{name.replace('_', '-')}")
        required = param.default is inspect.Parameter.empty
        default = None if required else param.default
        shown = getattr(tp, "__name__", str(tp))
        literal = _strip_optional(tp)
        if typing.get_origin(literal) is typing.Literal:
            shown = "{" + ",".join(_choice_text(v) for v in typing.get_args(literal)) + "}"
        parser.add_argument(*flags, dest=name, required=required, default=argparse.SUPPRESS,
                            metavar=shown.upper() if shown.isidentifier()
                            else shown if shown.startswith("{") else "VALUE",
                            help=f"{shown}" + ("" if required else f" (default: {default!r})"))
    return parser


def _options_hint(task: Any, prog: str) -> str:
    """What the task's command line takes, for the one line of a usage error."""
    names = [f"--{name}" + (" (required)" if p.default is inspect.Parameter.empty else "")
             for name, p in task.signature.parameters.items()]
    takes = f"{task.short_name} takes {', '.join(names)}" if names else \
        f"{task.short_name} takes no arguments"
    return f"{takes}; `{prog} --help` shows their types"


def parse_task_args(task: Any, argv: list[str]) -> dict[str, Any]:
    ns = task_parser(task).parse_args(argv)
    return {name: convert(text, task.hints[name], f"--{name}") for name, text in vars(ns).items()}
