"""The action, attempt and event methods of ``Records`` (the run methods are in runs.py).

An action is one task call inside a run; each try at running it is an attempt (0-based); events
are the run's append-only log, which ``shoal logs`` follows by id.
"""

from __future__ import annotations

import difflib
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shoal._storage.records.rows import (
    ACTION_COLUMNS,
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    action_from_row,
    attempt_from_row,
    event_from_row,
    to_json,
)
from shoal._storage.records.schema import (
    ACTION_KINDS,
    ACTION_STATES,
    ATTEMPT_STATES,
    TERMINAL_STATES,
    ActionRecord,
    AttemptRecord,
    EventRecord,
    check_state,
)
from shoal._storage.records.sqlite import RecordsFile
from shoal.errors import NotFoundError, ShoalSystemError

__all__ = ["ActionsAndEvents"]


class ActionsAndEvents(RecordsFile):
    """Actions, their attempts and the run's events; ``Records`` adds the runs themselves."""

    # -- actions --------------------------------------------------------------------------
    def create_action(
        self,
        *,
        run: str,
        action_id: str,
        parent_id: str | None = None,
        task: str,
        env: str,
        inputs: Mapping[str, Any],
        cache_key: str | None = None,
        group_path: Sequence[str] = (),
        kind: str = "task",
        custom_context: Mapping[str, str] | None = None,
    ) -> ActionRecord:
        """Record a new action in state ``queued``, or return the existing one unchanged.

        Get-or-create, so that an engine may repeat the call safely. The existing record is
        returned as it is (compare its ``state``/``created_at`` to tell); one recorded for a
        different task under the same id is a bug in the caller (``ShoalSystemError``).
        """
        inputs_json = to_json("action inputs", dict(inputs))
        group_json = to_json("action group", list(group_path)) if group_path else None
        context_json = to_json("action custom context", dict(custom_context)) \
            if custom_context else None
        if kind not in ACTION_KINDS:
            raise ValueError(f"action kind {kind!r} is not one of {sorted(ACTION_KINDS)}")

        def insert(conn: sqlite3.Connection) -> ActionRecord:
            row = conn.execute(
                f"SELECT {ACTION_COLUMNS} FROM actions WHERE run = ? AND action_id = ?",
                (run, action_id),
            ).fetchone()
            if row is not None:
                existing = action_from_row(row)
                if existing.task != task:
                    raise ShoalSystemError(
                        f"action {action_id!r} of run {run!r} is already recorded for task "
                        f"{existing.task!r}, not {task!r}: action ids must be unique in a run"
                    )
                return existing
            if not self._run_exists(conn, run):
                raise self._run_not_found(run)
            conn.execute(
                "INSERT INTO actions (run, action_id, parent_id, task, env, state, inputs,"
                " cache_key, created_at, group_path, kind, custom_context)"
                " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)",
                (run, action_id, parent_id, task, env, inputs_json, cache_key, time.time(),
                 group_json, kind, context_json),
            )
            return self._select_action(conn, run, action_id)

        return self._write(insert)

    def start_action(
        self,
        *,
        run: str,
        action_id: str,
        parent_id: str | None,
        task: str,
        env: str,
        inputs: Mapping[str, Any],
        cache_key: str | None,
        group_path: Sequence[str],
        custom_context: Mapping[str, str] | None,
        log_path: str,
    ) -> None:
        """Record a new action ``running`` with its attempt 0 started: what `create_action`,
        `set_action_state` (``running``) and `start_attempt` (0) record, in two statements,
        since every call that runs makes them. An action already recorded under that id, or
        an unknown run, takes those three steps, which say what is wrong."""
        inputs_json = to_json("action inputs", dict(inputs))
        group_json = to_json("action group", list(group_path)) if group_path else None
        context_json = to_json("action custom context", dict(custom_context)) \
            if custom_context else None

        def insert(conn: sqlite3.Connection) -> bool:
            now = time.time()
            try:
                conn.execute(
                    "INSERT INTO actions (run, action_id, parent_id, task, env, state, inputs,"
                    " cache_key, created_at, started_at, group_path, kind, custom_context)"
                    " VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, 'task', ?)",
                    (run, action_id, parent_id, task, env, inputs_json, cache_key, now, now,
                     group_json, context_json),
                )
            except sqlite3.IntegrityError:  # a taken id (primary key) or no such run (foreign)
                return False
            conn.execute(
                "INSERT INTO attempts (run, action_id, attempt, state, pid, log_path,"
                " started_at) VALUES (?, ?, 0, 'running', NULL, ?, ?)",
                (run, action_id, log_path, now),
            )
            return True

        if self._write(insert):
            return
        with self.batch():
            self.create_action(run=run, action_id=action_id, parent_id=parent_id, task=task,
                               env=env, inputs=inputs, cache_key=cache_key,
                               group_path=group_path, custom_context=custom_context)
            self.set_action_state(run, action_id, "running")
            self.start_attempt(run, action_id, 0, pid=None, log_path=log_path)

    def begin_trace(
        self,
        *,
        run: str,
        action_id: str,
        parent_id: str,
        name: str,
        env: str,
        inputs: Mapping[str, Any],
        group_path: Sequence[str] = (),
    ) -> None:
        """Record a traced call as ``running``, replacing what an earlier attempt of its task
        recorded under the same id: a retry that calls another function (or the same one with
        other inputs) at that position ran something else, and the record must say what."""
        inputs_json = to_json("trace inputs", dict(inputs))
        group_json = to_json("action group", list(group_path)) if group_path else None

        def upsert(conn: sqlite3.Connection) -> None:
            if not self._run_exists(conn, run):
                raise self._run_not_found(run)
            now = time.time()
            conn.execute(
                "INSERT INTO actions (run, action_id, parent_id, task, env, state, inputs,"
                " created_at, started_at, group_path, kind)"
                " VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, 'trace')"
                " ON CONFLICT (run, action_id) DO UPDATE SET task = excluded.task,"
                " inputs = excluded.inputs, state = 'running', outputs = NULL, error = NULL,"
                " started_at = excluded.started_at, ended_at = NULL,"
                " group_path = excluded.group_path",
                (run, action_id, parent_id, name, env, inputs_json, now, now, group_json),
            )

        self._write(upsert)

    def _select_action(self, conn: sqlite3.Connection, run: str, action_id: str) -> ActionRecord:
        row = conn.execute(
            f"SELECT {ACTION_COLUMNS} FROM actions WHERE run = ? AND action_id = ?",
            (run, action_id),
        ).fetchone()
        if row is None:
            raise self._action_not_found(conn, run, action_id)
        return action_from_row(row)

    def _action_not_found(
        self, conn: sqlite3.Connection, run: str, action_id: str
    ) -> NotFoundError:
        if not self._run_exists(conn, run):
            return self._run_not_found(run)
        known = [r[0] for r in conn.execute("SELECT action_id FROM actions WHERE run = ?", (run,))]
        close = difflib.get_close_matches(action_id, known, n=3)
        fix = (
            f"did you mean {' or '.join(map(repr, close))}?"
            if close
            else (f"the run has {len(known)} action(s); see `shoal logs {run}`")
        )
        return NotFoundError(f"run {run!r} has no action {action_id!r}. Fix: {fix}")

    def set_action_state(
        self,
        run: str,
        action_id: str,
        state: str,
        *,
        error: str | None = None,
        outputs: object = None,
        cache_hit: bool = False,
    ) -> None:
        """Move an action to ``state``.

        Unlike runs, any move is allowed: the engine owns an action's life (a retry may take
        a failed action back to ``running``). ``error`` replaces the stored error, None
        clears it; ``outputs=None`` keeps stored outputs; ``cached`` implies ``cache_hit``.
        The first ``running`` sets ``started_at``; a terminal state sets ``ended_at``, a
        non-terminal one clears it.
        """
        check_state("action", state, ACTION_STATES)
        outputs_json = None if outputs is None else to_json("action outputs", outputs)
        hit = cache_hit or state == "cached"

        def update(conn: sqlite3.Connection) -> None:
            now = time.time()
            cur = conn.execute(
                "UPDATE actions SET state = ?, error = ?, outputs = COALESCE(?, outputs),"
                " cache_hit = CASE WHEN ? THEN 1 ELSE cache_hit END,"
                " started_at = CASE WHEN ? AND started_at IS NULL THEN ? ELSE started_at END,"
                " ended_at = CASE WHEN ? THEN ? ELSE NULL END"
                " WHERE run = ? AND action_id = ?",
                (
                    state,
                    error,
                    outputs_json,
                    hit,
                    state == "running",
                    now,
                    state in TERMINAL_STATES,
                    now,
                    run,
                    action_id,
                ),
            )
            if not cur.rowcount:
                raise self._action_not_found(conn, run, action_id)

        self._write(update)

    def get_action(self, run: str, action_id: str) -> ActionRecord:
        return self._retrying(lambda c: self._select_action(c, run, action_id))

    def find_action(self, run: str, action_id: str) -> ActionRecord | None:
        """The action, or None: for lookups that expect misses (no suggestions computed)."""

        def read(conn: sqlite3.Connection) -> ActionRecord | None:
            row = conn.execute(
                f"SELECT {ACTION_COLUMNS} FROM actions WHERE run = ? AND action_id = ?",
                (run, action_id),
            ).fetchone()
            return None if row is None else action_from_row(row)

        return self._retrying(read)

    def list_actions(self, run: str) -> list[ActionRecord]:
        """The run's actions in the order they were created."""

        def read(conn: sqlite3.Connection) -> list[ActionRecord]:
            rows = conn.execute(
                f"SELECT {ACTION_COLUMNS} FROM actions WHERE run = ?"
                " ORDER BY created_at, action_id",
                (run,),
            ).fetchall()
            if not rows and not self._run_exists(conn, run):
                raise self._run_not_found(run)
            return [action_from_row(r) for r in rows]

        return self._retrying(read)

    # -- attempts -------------------------------------------------------------------------
    def start_attempt(
        self,
        run: str,
        action_id: str,
        attempt: int,
        *,
        pid: int | None,
        log_path: str | Path | None,
    ) -> None:
        """Record attempt ``attempt`` (0-based) of an action as ``running``."""

        def insert(conn: sqlite3.Connection) -> None:
            self._select_action(conn, run, action_id)  # NotFoundError if unknown
            taken = conn.execute(
                "SELECT 1 FROM attempts WHERE run = ? AND action_id = ? AND attempt = ?",
                (run, action_id, attempt),
            ).fetchone()
            if taken:
                raise ShoalSystemError(
                    f"attempt {attempt} of action {action_id!r} (run {run!r}) was already "
                    "started: attempt numbers must not be reused"
                )
            conn.execute(
                "INSERT INTO attempts (run, action_id, attempt, state, pid, log_path,"
                " started_at) VALUES (?, ?, ?, 'running', ?, ?, ?)",
                (
                    run,
                    action_id,
                    attempt,
                    pid,
                    None if log_path is None else str(log_path),
                    time.time(),
                ),
            )

        self._write(insert)

    def finish_attempt(
        self,
        run: str,
        action_id: str,
        attempt: int,
        *,
        state: str,
        exit_code: int | None = None,
        signal: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record how an attempt ended; ``state`` is a terminal attempt state."""
        check_state("attempt", state, ATTEMPT_STATES - {"running"})

        def update(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE attempts SET state = ?, exit_code = ?, signal = ?, error = ?,"
                " ended_at = ? WHERE run = ? AND action_id = ? AND attempt = ?",
                (state, exit_code, signal, error, time.time(), run, action_id, attempt),
            )
            if not cur.rowcount:
                self._select_action(conn, run, action_id)  # a NotFoundError naming the action
                raise NotFoundError(
                    f"action {action_id!r} of run {run!r} has no attempt {attempt}. "
                    "Fix: call start_attempt first"
                )

        self._write(update)

    def list_attempts(self, run: str, action_id: str | None = None) -> list[AttemptRecord]:
        """Attempts of the run (or of one of its actions), oldest first."""
        query = f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE run = ?"
        params: list[object] = [run]
        if action_id is not None:
            query += " AND action_id = ?"
            params.append(action_id)
        query += " ORDER BY started_at, action_id, attempt"
        rows = self._retrying(lambda c: c.execute(query, params).fetchall())
        return [attempt_from_row(r) for r in rows]

    # -- events ---------------------------------------------------------------------------
    def add_event(
        self,
        run: str,
        kind: str,
        message: str,
        *,
        action_id: str | None = None,
        data: object = None,
    ) -> int:
        """Append an event to the run's log; returns its id (ids only grow)."""
        data_json = None if data is None else to_json("event data", data)

        def insert(conn: sqlite3.Connection) -> int:
            if not self._run_exists(conn, run):
                raise self._run_not_found(run)
            return self._insert_event(conn, run, action_id, kind, message, data_json)

        return self._write(insert)

    @staticmethod
    def _insert_event(
        conn: sqlite3.Connection,
        run: str,
        action_id: str | None,
        kind: str,
        message: str,
        data_json: str | None,
    ) -> int:
        cur = conn.execute(
            "INSERT INTO events (run, action_id, at, kind, message, data)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run, action_id, time.time(), kind, message, data_json),
        )
        return int(cur.lastrowid or 0)

    def events(self, run: str, *, after_id: int = 0, limit: int | None = None) -> list[EventRecord]:
        """The run's events with an id above ``after_id``, oldest first (for following)."""

        def read(conn: sqlite3.Connection) -> list[EventRecord]:
            query = f"SELECT {EVENT_COLUMNS} FROM events WHERE run = ? AND id > ? ORDER BY id"
            params: list[object] = [run, after_id]
            if limit is not None:
                query += " LIMIT ?"
                params.append(limit)
            rows = conn.execute(query, params).fetchall()
            if not rows and not self._run_exists(conn, run):
                raise self._run_not_found(run)
            return [event_from_row(r) for r in rows]

        return self._retrying(read)
