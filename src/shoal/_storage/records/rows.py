"""Between record objects and SQLite rows: column lists, JSON columns, row → record."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields
from typing import Any

from shoal._storage.records.schema import ActionRecord, AttemptRecord, EventRecord, RunRecord

__all__ = [
    "ACTION_COLUMNS",
    "ATTEMPT_COLUMNS",
    "EVENT_COLUMNS",
    "RUN_COLUMNS",
    "action_from_row",
    "attempt_from_row",
    "event_from_row",
    "from_json",
    "run_from_row",
    "to_json",
]


def _columns(record: type) -> str:
    return ", ".join(f.name for f in fields(record))


# The SELECT list of each table: every field of its record type, in field order.
RUN_COLUMNS = _columns(RunRecord)
ACTION_COLUMNS = _columns(ActionRecord)
ATTEMPT_COLUMNS = _columns(AttemptRecord)
EVENT_COLUMNS = _columns(EventRecord)


def to_json(what: str, value: object) -> str:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be JSON-serializable for the run records: {err}") from err


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def run_from_row(row: sqlite3.Row) -> RunRecord:
    d = dict(row)
    d["inputs"] = from_json(d["inputs"])
    d["outputs"] = from_json(d["outputs"])
    d["cancel_requested"] = bool(d["cancel_requested"])
    return RunRecord(**d)


def action_from_row(row: sqlite3.Row) -> ActionRecord:
    d = dict(row)
    d["inputs"] = from_json(d["inputs"])
    d["outputs"] = from_json(d["outputs"])
    d["cache_hit"] = bool(d["cache_hit"])
    d["group_path"] = tuple(from_json(d["group_path"]) or ())
    d["custom_context"] = from_json(d["custom_context"]) or {}
    return ActionRecord(**d)


def attempt_from_row(row: sqlite3.Row) -> AttemptRecord:
    return AttemptRecord(**dict(row))


def event_from_row(row: sqlite3.Row) -> EventRecord:
    d = dict(row)
    d["data"] = from_json(d["data"])
    return EventRecord(**d)
