"""The rules of every name that becomes a path, a store key, a label or a line of a script.

One home for each rule, applied where a name enters (the CLI, ``shoal.run`` and
``with_runcontext``, the web UI's routes, records and values read back from a store), so that
a name past its door is safe to put in a path under its root, in a ``#SBATCH`` line, in a
Kubernetes label's readable head, or in a printed plan. Each check returns the value it was
given, or raises `SpecError` naming the field, the value, the rule and the fix.

    run        1-63 letters, digits, '-', '_', '.'; starts with a letter or digit; no '..'
    task       1-100 letters, digits, '-', '_'; starts with a letter or '_'
    environment  lower-case kebab- or snake-case, 1-63 characters (a DNS label's room)
    action id  as a run name, up to 200 characters (``a0.3.t1``: the driver's own grammar)
    region     a profiled region's name (part of its report's file name): as a run name
    node       a host name: letters, digits, '-', '_', '.', 1-253 characters; no '..'
    group      free text shown to people: 1-200 printable characters
    object     a relative path under a folder (File/Dir names, store keys under a prefix):
               no leading '/', no '', '.' or '..' segment, no backslash, no control character

`shown` is the other half: text a renderer prints on one line, with any character that could
start a new line (or hide one) written as its escape.
"""

from __future__ import annotations

import re

from shoal.errors import SpecError

__all__ = [
    "MAX_ENV_NAME",
    "MAX_LABEL_TEXT",
    "check_action_id",
    "check_env_name",
    "check_label_text",
    "check_node_name",
    "check_object_name",
    "check_path_segment",
    "check_region_name",
    "check_run_name",
    "check_task_name",
    "shown",
    "suggest_env_name",
]

MAX_ENV_NAME = 63  # a Kubernetes label value / DNS label
MAX_RUN_NAME = 63
MAX_ACTION_ID = 200
MAX_TASK_NAME = 100
MAX_NODE_NAME = 253  # a DNS name
MAX_LABEL_TEXT = 200
MAX_OBJECT_NAME = 1024  # S3's and GCS's longest key

_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TASK = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_ENV = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


def shown(text: str) -> str:
    """``text`` with each non-printable character (newline, NUL, escape, a Unicode line
    separator...) written as its Python escape, so one value stays on one printed line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _guess(value: object, length: int) -> str:
    guess = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value))
    return re.sub(r"\.{2,}", ".", guess).strip("-._")[:length]


def _dotted(field: str, value: object, what: str, length: int, example: str) -> str:
    """A run name or an action id: one path segment, safe in a file name and a job name."""
    if (isinstance(value, str) and len(value) <= length and _RUN.fullmatch(value)
            and ".." not in value):
        return value
    raise SpecError(field, value, f"{what} is 1-{length} letters, digits, '-', '_' or '.', "
                    "starting with a letter or digit, without '..'",
                    f"use {_guess(value, length) or example!r}")


def check_run_name(field: str, value: object) -> str:
    """A run's name: a folder under ``$SHOAL_HOME/runs``, a prefix in the store, a Slurm job
    name's middle, the readable head of Kubernetes names. A prefix of a valid name is valid,
    so the CLI's reads check what they are given with this too."""
    return _dotted(field, value, "a run name", MAX_RUN_NAME, "my-run")


def check_action_id(field: str, value: object) -> str:
    """An action's id (``a0``, ``a0.2``, ``a0.2.t1``): part of log file names and store keys."""
    return _dotted(field, value, "an action id", MAX_ACTION_ID, "a0")


def check_region_name(field: str, value: object) -> str:
    """A profiled region's name (``nsys.range("hot-loop")``): its report is ``rank<r>.<name>``
    in the call's profile folder."""
    return _dotted(field, value, "a region name", MAX_RUN_NAME, "hot-loop")


def check_task_name(field: str, value: object) -> str:
    """A task's ``name=``: the key its worker finds it by and a folder of the cache."""
    if isinstance(value, str) and len(value) <= MAX_TASK_NAME and _TASK.fullmatch(value):
        return value
    guess = re.sub(r"[^A-Za-z0-9_-]+", "_", str(value)).strip("-_")[:MAX_TASK_NAME]
    raise SpecError(field, value, f"a task name is 1-{MAX_TASK_NAME} letters, digits, '-' or "
                    "'_', starting with a letter or '_'",
                    f"use {guess if _TASK.fullmatch(guess) else 'my_task'!r}")


def check_node_name(field: str, value: object) -> str:
    """A node's host name as its scheduler reports it (shown, and passed to srun)."""
    if (isinstance(value, str) and len(value) <= MAX_NODE_NAME and _RUN.fullmatch(value)
            and ".." not in value):
        return value
    raise SpecError(field, value, f"a node name is 1-{MAX_NODE_NAME} letters, digits, '-', '_' "
                    "or '.', starting with a letter or digit", "check the scheduler's node list")


def check_label_text(field: str, value: object) -> str:
    """Free text shown to people (a group's name, a task's display name): any printable
    characters, so a value cannot forge a line in a log, a tree or a plan."""
    if not isinstance(value, str):
        raise SpecError(field, value, "must be a string", 'e.g. "epoch-1"')
    rule: str | None = None
    if not value.strip():
        rule = "must not be empty"
    elif len(value) > MAX_LABEL_TEXT:
        rule = f"must be at most {MAX_LABEL_TEXT} characters (it is {len(value)})"
    elif not value.isprintable():
        rule = "must hold printable characters only (no newline, tab, NUL or escape)"
    if rule is None:
        return value
    fix = shown(value.strip())[:MAX_LABEL_TEXT]
    raise SpecError(field, value, rule, f"use {fix!r}" if fix.strip() else 'e.g. "epoch-1"')


def check_object_name(field: str, value: object) -> str:
    """A path relative to a folder (a File's or Dir's name, a store key under a prefix): every
    place it is joined to stays under that folder, on a laptop and in a bucket alike."""
    if not isinstance(value, str):
        raise SpecError(field, value, "an object name must be a string", "e.g. 'model.pt'")
    rule: str | None = None
    if not value:
        rule = "must not be empty"
    elif len(value) > MAX_OBJECT_NAME:
        rule = f"must be at most {MAX_OBJECT_NAME} characters (it is {len(value)})"
    elif not value.isprintable():
        rule = "must hold printable characters only (no newline, tab, NUL or escape)"
    elif "\\" in value:
        rule = "must not hold a backslash"
    elif value.startswith("/"):
        rule = "must be relative (no leading '/')"
    elif any(seg in ("", ".", "..") for seg in value.split("/")):
        rule = "must not hold an empty, '.' or '..' segment"
    if rule is None:
        return value
    raise SpecError(field, value,
                    f"an object name is a relative path under its folder; it {rule}",
                    "use a plain relative name such as 'model.pt' or 'shards/0.bin'")


def check_path_segment(field: str, value: object) -> str:
    """One segment of a path or a store key: what a renderer asks of a name it puts in one
    (a run's folder, an attempt's store prefix), whatever door the name came through."""
    check_object_name(field, value)
    if isinstance(value, str) and "/" in value:
        raise SpecError(field, value, "must be one path segment (no '/')",
                        f"use {value.replace('/', '-')!r}")
    return str(value)


def suggest_env_name(value: str) -> str:
    """The nearest valid environment name: lower-cased, odd characters to '-', trimmed."""
    out = re.sub(r"[^a-z0-9_-]+", "-", value.strip().lower())
    out = re.sub(r"([-_])[-_]+", r"\1", out).strip("-_")
    out = out.lstrip("0123456789-_")
    return out[:MAX_ENV_NAME].rstrip("-_") or "my-env"


def check_env_name(field: str, value: object) -> str:
    """An environment's name (a process, pod and DNS name): lower-case kebab- or snake-case."""
    if not isinstance(value, str):
        raise SpecError(field, value, "must be a string", 'pass a name such as "pretrain"')
    rule: str | None = None
    if not value:
        rule = "must not be empty"
    elif len(value) > MAX_ENV_NAME:
        rule = f"must be at most {MAX_ENV_NAME} characters (it is {len(value)})"
    elif value != value.lower():
        rule = "must be lower case"
    elif not value[0].isalpha():
        rule = "must start with a letter"
    elif bad := sorted(set(re.sub(r"[a-z0-9_-]", "", value))):
        rule = f"may only hold a-z, 0-9, '-' and '_' (found {''.join(bad)!r})"
    elif value[-1] in "-_":
        rule = "must not end with '-' or '_'"
    elif "--" in value or "__" in value or "-_" in value or "_-" in value:
        rule = "must not hold two separators in a row"
    elif not _ENV.match(value):  # pragma: no cover - the checks above cover the grammar
        rule = "must be lower-case kebab-case or snake_case"
    if rule is None:
        return value
    raise SpecError(field, value, f"a name {rule}", f"use {suggest_env_name(value)!r}")
