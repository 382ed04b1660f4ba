"""A run's records as one JSON document, and that document merged into another records file.

A run whose driver runs elsewhere (a Kubernetes driver pod) keeps its records in that
driver's own SQLite, which no other machine can open. The driver exports them (`snapshot`)
to the store; the submitting machine merges the export into its own file (`merge_snapshot`),
so every reader of the records (`shoal runs RUN`, `shoal logs`, the web UI) reads such a run
exactly as it reads a local one.

Merging is idempotent: actions and attempts are upserted by their keys; events are appended
past those already merged (the driver only ever appends events), counted without the events
this machine wrote itself (`LOCAL_EVENT_KINDS`); the run's state only moves while it is not
terminal here, as `set_run_state` does, and never back from running to queued (the
submitter marks it running once the driver is submitted).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from shoal._spec.names import check_action_id, check_label_text
from shoal._storage.records.actions import ActionsAndEvents
from shoal._storage.records.rows import RUN_COLUMNS, run_from_row, to_json
from shoal._storage.records.schema import ACTIVE_SQL, ActionRecord, AttemptRecord
from shoal.errors import SpecError

__all__ = ["LOCAL_EVENT_KINDS", "MirroredRecords", "check_snapshot"]

# Events the submitting machine records about a run driven elsewhere; never in an export.
LOCAL_EVENT_KINDS = ("driver_submitted",)
_LOCAL_SQL = "(" + ", ".join(f"'{k}'" for k in LOCAL_EVENT_KINDS) + ")"

_ACTION_FIELDS = [f.name for f in dataclasses.fields(ActionRecord)]
_ATTEMPT_FIELDS = [f.name for f in dataclasses.fields(AttemptRecord)]
_JSON_ACTION_FIELDS = {"inputs", "outputs", "group_path", "custom_context"}


def check_snapshot(snap: Mapping[str, Any]) -> None:
    """Refuse (`SpecError`) a snapshot whose action ids, attempt numbers or group names break
    their rules (`shoal._spec.names`): another machine wrote it, and the store it came
    through may hold anything."""
    for kind in ("actions", "attempts", "events"):
        for i, row in enumerate(snap.get(kind) or ()):
            where = f"records.json {kind}[{i}]"
            if not isinstance(row, Mapping):
                raise SpecError(where, row, "must be an object", "republish the records")
            if kind != "events" or row.get("action_id") is not None:
                check_action_id(f"{where}.action_id", row.get("action_id"))
            if kind != "events" and row.get("parent_id") is not None:
                check_action_id(f"{where}.parent_id", row["parent_id"])
            if kind == "attempts" and (type(row.get("attempt")) is not int
                                       or row["attempt"] < 0):
                raise SpecError(f"{where}.attempt", row.get("attempt"),
                                "must be a whole number >= 0", "republish the records")
            if kind == "actions":
                for name in row.get("group_path") or ():
                    check_label_text(f"{where}.group_path", name)


class MirroredRecords(ActionsAndEvents):
    """Export and merge of whole runs; ``Records`` inherits it."""

    def snapshot(self, run: str) -> dict[str, Any]:
        """The run, its actions, attempts and events, as JSON-ready values."""

        def read(conn: sqlite3.Connection) -> dict[str, Any]:
            row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE name = ?",
                               (run,)).fetchone()
            if row is None:
                raise self._run_not_found(run)
            return {"run": dataclasses.asdict(run_from_row(row))}

        out = self._retrying(read)
        out["actions"] = [dataclasses.asdict(a) for a in self.list_actions(run)]
        out["attempts"] = [dataclasses.asdict(a) for a in self.list_attempts(run)]
        out["events"] = [{"action_id": e.action_id, "at": e.at, "kind": e.kind,
                          "message": e.message, "data": e.data} for e in self.events(run)]
        return out

    def merge_snapshot(self, name: str, snap: Mapping[str, Any],
                       log_path: Callable[[str, int], str] | None = None) -> bool:
        """Merge ``snap`` (a `snapshot` of run ``name`` from elsewhere) into this file; each
        attempt's log path becomes ``log_path(action, attempt)`` when given. True when the
        run's state changed here. What came from elsewhere is checked before a row is
        written (`check_snapshot`): its action ids become file names here."""
        check_snapshot(snap)
        run = snap["run"]

        def merge(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE runs SET state = ?, error = ?, outputs = COALESCE(?, outputs),"
                " started_at = COALESCE(?, started_at), ended_at = ?"
                f" WHERE name = ? AND state IN {ACTIVE_SQL} AND (state != ? OR ended_at"
                " IS NOT ?) AND NOT (state = 'running' AND ? = 'queued')",
                (run["state"], run.get("error"),
                 None if run.get("outputs") is None else to_json("run outputs", run["outputs"]),
                 run.get("started_at"), run.get("ended_at"), name, run["state"],
                 run.get("ended_at"), run["state"]))
            for action in snap.get("actions") or ():
                values = [to_json(f, action.get(f)) if f in _JSON_ACTION_FIELDS else action.get(f)
                          for f in _ACTION_FIELDS]
                values[0] = name
                self._upsert(conn, "actions", _ACTION_FIELDS, values, ("run", "action_id"))
            for attempt in snap.get("attempts") or ():
                values = [attempt.get(f) for f in _ATTEMPT_FIELDS]
                values[0] = name
                if log_path is not None:
                    values[_ATTEMPT_FIELDS.index("log_path")] = log_path(
                        attempt["action_id"], int(attempt["attempt"]))
                self._upsert(conn, "attempts", _ATTEMPT_FIELDS, values,
                             ("run", "action_id", "attempt"))
            (merged,) = conn.execute(
                f"SELECT COUNT(*) FROM events WHERE run = ? AND kind NOT IN {_LOCAL_SQL}",
                (name,)).fetchone()
            for event in list(snap.get("events") or ())[int(merged):]:
                conn.execute(
                    "INSERT INTO events (run, action_id, at, kind, message, data)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (name, event.get("action_id"), event["at"], event["kind"],
                     event["message"], None if event.get("data") is None
                     else to_json("event data", event["data"])))
            return bool(cur.rowcount)

        return self._write(merge)

    @staticmethod
    def _upsert(conn: sqlite3.Connection, table: str, columns: list[str], values: list[Any],
                key: tuple[str, ...]) -> None:
        # An upsert, not INSERT OR REPLACE: replacing an action would delete the row its
        # attempts reference, which the foreign keys refuse.
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
        conn.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES"
            f" ({', '.join('?' for _ in columns)}) ON CONFLICT ({', '.join(key)})"
            f" DO UPDATE SET {updates}", values)
