"""Validation of the names users give to environments (they become process, pod and DNS names)."""

from __future__ import annotations

import re

from shoal.errors import SpecError

MAX_NAME = 63  # a Kubernetes label value / DNS label
_VALID = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


def suggest_name(value: str) -> str:
    """The nearest valid name: lower-cased, odd characters to '-', trimmed."""
    out = re.sub(r"[^a-z0-9_-]+", "-", value.strip().lower())
    out = re.sub(r"([-_])[-_]+", r"\1", out).strip("-_")
    out = out.lstrip("0123456789-_")
    return out[:MAX_NAME].rstrip("-_") or "my-env"


def check_name(field: str, value: object) -> str:
    """Return ``value`` if it is a lower-case kebab- or snake-case name, else raise SpecError."""
    if not isinstance(value, str):
        raise SpecError(field, value, "must be a string", 'pass a name such as "pretrain"')
    rule: str | None = None
    if not value:
        rule = "must not be empty"
    elif len(value) > MAX_NAME:
        rule = f"must be at most {MAX_NAME} characters (it is {len(value)})"
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
    elif not _VALID.match(value):  # pragma: no cover - the checks above cover the grammar
        rule = "must be lower-case kebab-case or snake_case"
    if rule is None:
        return value
    raise SpecError(field, value, f"a name {rule}", f"use {suggest_name(value)!r}")
