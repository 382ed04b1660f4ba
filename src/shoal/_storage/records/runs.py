"""Local run records: runs, actions, attempts and events in one SQLite file.

``Records`` is the API the engines, the controller and the CLI use. It is assembled from:

- ``schema.py``: the record types, their states, the tables and their migrations;
- ``rows.py``: column lists, JSON columns, row → record;
- ``sqlite.py``: the file itself (per-thread connections, WAL, retried transactions:
  why many processes can share it safely);
- ``actions.py``: the action, attempt and event methods;
- this file: the run methods, and finding runs whose engine died.

A run whose engine process died cannot record its own end; ``Records.reap_dead_runs`` finds
such runs on this host and marks them ``crashed``. Readers call it before they list runs.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from shoal._spec.names import check_run_name
from shoal._storage.records.mirror import MirroredRecords
from shoal._storage.records.rows import RUN_COLUMNS, run_from_row, to_json
from shoal._storage.records.schema import (
    ACTION_STATES,
    ACTIVE_SQL,
    ATTEMPT_STATES,
    RUN_STATES,
    SCHEMA_VERSION,
    TERMINAL_STATES,
    ActionRecord,
    AttemptRecord,
    EventRecord,
    RunRecord,
    check_state,
)
from shoal.errors import NotFoundError, SpecError

__all__ = [
    "ACTION_STATES",
    "ATTEMPT_STATES",
    "PREEMPT_REQUEST",
    "RUN_STATES",
    "SCHEMA_VERSION",
    "TERMINAL_STATES",
    "ActionRecord",
    "AttemptRecord",
    "EventRecord",
    "Records",
    "RunRecord",
]


# The event `shoal preempt` (and the UI's preempt button) adds; the run's driver acts on it.
PREEMPT_REQUEST = "preempt_requested"

# A reused pid has a different start time; psutil reports it to 1/100 s, so 1 s is generous.
_START_TIME_TOLERANCE_S = 1.0


# --- engine processes -----------------------------------------------------------------------
def _process_start_time(pid: int) -> float | None:
    import psutil  # lazily: only writers and the reaper need it

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _engine_alive(pid: int, started_at: float | None) -> bool:
    """Whether ``pid`` on this host is still the engine that started at ``started_at``."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # killed, not yet waited for by its parent
            return False
        if started_at is not None:
            return bool(abs(proc.create_time() - started_at) <= _START_TIME_TOLERANCE_S)
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:  # exists, owned by someone else: assume it is the engine
        return True
    return True


def _make_run_name() -> str:
    # UTC so names sort by time across time zones and DST changes.
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"r-{stamp}-{secrets.token_hex(2)}"


# --- the records ----------------------------------------------------------------------------
class Records(MirroredRecords):
    """The run records of this machine, in ``path`` (default ``$SHOAL_HOME/shoal.db``).

    Safe to share between threads of a process (each thread gets its own connection) and to
    open from many processes at once. Names passed to the writing methods are exact; the
    user-facing ``get_run`` and ``request_cancel`` also accept a unique prefix.
    """

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------------------
    def new_run_name(self) -> str:
        """A fresh name like ``r-20261130-081233-3f9a`` (UTC time, sortable).

        Not reserved: ``create_run(name=None)`` picks and inserts a name in one transaction,
        which is the race-free way for concurrent engines.
        """
        while True:
            name = _make_run_name()
            if not self._retrying(functools.partial(self._run_exists, name=name)):
                return name

    def create_run(
        self,
        *,
        name: str | None = None,
        task: str,
        code_file: str,
        engine: str,
        store: str,
        inputs: Mapping[str, Any],
        engine_pid: int | None = None,
        engine_host: str | None = None,
        resumed_from: str | None = None,
        driven_elsewhere: str | None = None,
    ) -> RunRecord:
        """Record a new run in state ``queued``; ``name=None`` picks a fresh unique name.

        ``engine_pid``/``engine_host`` default to this process and ``socket.gethostname()``;
        they are what ``reap_dead_runs`` checks. A run whose driver runs elsewhere (a
        Kubernetes driver pod) has no pid here: ``driven_elsewhere`` names where it runs
        instead, and the reaper leaves it alone. A name already taken is a ``SpecError``.
        """
        if name is not None:  # every run's folder, store prefix and job names start here
            check_run_name("name", name)
        pid: int | None = os.getpid() if engine_pid is None else engine_pid
        host = socket.gethostname() if engine_host is None else engine_host
        if driven_elsewhere is not None:
            pid, host = None, driven_elsewhere
        elif pid is not None and pid <= 0:
            raise ValueError(f"engine_pid={pid}: must be a positive process id")
        started = (_process_start_time(pid) if pid is not None and host == socket.gethostname()
                   else None)
        inputs_json = to_json("run inputs", dict(inputs))

        def insert(conn: sqlite3.Connection) -> RunRecord:
            run_name = name
            if run_name is None:
                run_name = _make_run_name()
                while self._run_exists(conn, run_name):  # we hold the write lock: no race
                    run_name = _make_run_name()
            elif self._run_exists(conn, run_name):
                raise SpecError(
                    "name",
                    run_name,
                    "a run with this name already exists",
                    "choose another name, or leave it out for a generated one",
                )
            conn.execute(
                "INSERT INTO runs (name, task, code_file, engine, store, inputs, state,"
                " created_at, engine_pid, engine_host, engine_started_at, resumed_from)"
                " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                (
                    run_name,
                    task,
                    code_file,
                    engine,
                    store,
                    inputs_json,
                    time.time(),
                    pid,
                    host,
                    started,
                    resumed_from,
                ),
            )
            return self._select_run(conn, run_name)

        return self._write(insert)

    def _select_run(self, conn: sqlite3.Connection, name: str) -> RunRecord:
        row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise self._run_not_found(name)
        return run_from_row(row)

    def set_run_state(
        self, name: str, state: str, *, error: str | None = None, outputs: object = None
    ) -> bool:
        """Move a run to ``state``; returns False (and changes nothing) if it already ended.

        A terminal state is final, so a late write (say, from an engine the reaper gave up on)
        cannot overwrite how the run ended. ``error`` replaces the stored error (None clears
        it); ``outputs=None`` keeps the stored outputs. Entering ``running`` sets
        ``started_at``, entering a terminal state sets ``ended_at``.
        """
        check_state("run", state, RUN_STATES)
        outputs_json = None if outputs is None else to_json("run outputs", outputs)

        def update(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cur = conn.execute(
                "UPDATE runs SET state = ?, error = ?, outputs = COALESCE(?, outputs),"
                " started_at = CASE WHEN ? AND started_at IS NULL THEN ? ELSE started_at END,"
                " ended_at = CASE WHEN ? THEN ? ELSE ended_at END"
                f" WHERE name = ? AND state IN {ACTIVE_SQL}",
                (
                    state,
                    error,
                    outputs_json,
                    state == "running",
                    now,
                    state in TERMINAL_STATES,
                    now,
                    name,
                ),
            )
            if cur.rowcount:
                return True
            if not self._run_exists(conn, name):
                raise self._run_not_found(name)
            return False

        return self._write(update)

    def heartbeat(self, name: str) -> None:
        def update(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE runs SET heartbeat_at = ? WHERE name = ?", (time.time(), name)
            )
            if not cur.rowcount:
                raise self._run_not_found(name)

        self._write(update)

    def request_cancel(self, name: str) -> bool:
        """Ask the run's engine to cancel it; False if the run already ended."""
        run = self.get_run(name)

        def update(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                f"UPDATE runs SET cancel_requested = 1 WHERE name = ? AND state IN {ACTIVE_SQL}",
                (run.name,),
            )
            if cur.rowcount:
                self._insert_event(
                    conn, run.name, None, "cancel_requested", "cancellation requested", None
                )
            return bool(cur.rowcount)

        return self._write(update)

    def request_preempt(self, name: str, by: str) -> bool:
        """Ask the run's driver to preempt its running gangs; False if the run already ended.
        ``by`` names who asked, for the event's message."""
        run = self.get_run(name)
        if run.terminal:
            return False
        self.add_event(run.name, PREEMPT_REQUEST, f"preemption requested by {by}")
        return True

    def cancel_requested(self, name: str) -> bool:
        def read(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT cancel_requested FROM runs WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise self._run_not_found(name)
            return bool(row[0])

        return self._retrying(read)

    def lineage(self, name: str) -> list[RunRecord]:
        """This run and the runs it resumes, newest first (``shoal run --resume`` chains)."""
        chain = [self.get_run(name)]
        while chain[-1].resumed_from and len(chain) < 1000:
            chain.append(self.get_run(chain[-1].resumed_from))
        return chain

    def get_run(self, name: str, *, prefix: bool = True) -> RunRecord:
        """The run named ``name``, or (with ``prefix``, for what people type to read a run)
        the only run whose name starts with ``name``."""

        def read(conn: sqlite3.Connection) -> RunRecord:
            row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE name = ?", (name,)).fetchone()
            if row is not None:
                return run_from_row(row)
            rows = (
                []
                if not name or not prefix
                else conn.execute(
                    f"SELECT {RUN_COLUMNS} FROM runs WHERE substr(name, 1, ?) = ?"
                    " ORDER BY created_at DESC LIMIT 6",
                    (len(name), name),
                ).fetchall()
            )
            if len(rows) == 1:
                return run_from_row(rows[0])
            if rows:
                shown = ", ".join(r["name"] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
                raise NotFoundError(
                    f"run {name!r} is ambiguous: it starts {shown}. Fix: give more of the "
                    "name; see `shoal runs`"
                )
            raise self._run_not_found(name)

        return self._retrying(read)

    def list_runs(self, *, limit: int | None = 20, state: str | None = None) -> list[RunRecord]:
        """The newest runs first, optionally only those in ``state``; ``limit=None``: all."""
        if state is not None:
            check_state("run", state, RUN_STATES)
        query = f"SELECT {RUN_COLUMNS} FROM runs"
        params: list[object] = []
        if state is not None:
            query += " WHERE state = ?"
            params.append(state)
        query += " ORDER BY created_at DESC, name DESC"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        rows = self._retrying(lambda c: c.execute(query, params).fetchall())
        return [run_from_row(r) for r in rows]

    def reap_dead_runs(self) -> list[str]:
        """Mark ``crashed`` every unfinished run of this host whose engine process is gone.

        An engine counts as gone when its pid no longer exists, is a zombie, or now belongs to
        a process that started at another time (the pid was reused). Their unfinished actions
        become ``failed`` and running attempts ``crashed``. Runs of other hosts are left alone:
        their pids mean nothing here. Returns the names of the runs it marked.
        """
        rows = self._retrying(
            lambda c: c.execute(
                "SELECT name, engine_pid, engine_started_at FROM runs"
                f" WHERE state IN {ACTIVE_SQL} AND engine_host = ? AND engine_pid IS NOT NULL",
                (socket.gethostname(),),
            ).fetchall()
        )
        reaped = []
        for row in rows:
            name, pid = str(row["name"]), int(row["engine_pid"])
            if _engine_alive(pid, row["engine_started_at"]):
                continue
            if self._write(functools.partial(self._mark_crashed, name=name, pid=pid)):
                reaped.append(name)
        return reaped

    def _mark_crashed(self, conn: sqlite3.Connection, name: str, pid: int) -> bool:
        now = time.time()
        message = f"the engine process (pid {pid}) died without finishing the run"
        cur = conn.execute(
            "UPDATE runs SET state = 'crashed', error = ?, ended_at = ?"
            f" WHERE name = ? AND state IN {ACTIVE_SQL}",
            (message, now, name),
        )
        if not cur.rowcount:
            return False  # it ended, or another reader reaped it, since we looked
        unfinished = f"the engine process (pid {pid}) died before this finished"
        conn.execute(
            "UPDATE attempts SET state = 'crashed', error = COALESCE(error, ?), ended_at = ?"
            " WHERE run = ? AND state = 'running'",
            (unfinished, now, name),
        )
        conn.execute(
            "UPDATE actions SET state = 'failed', error = COALESCE(error, ?), ended_at = ?"
            f" WHERE run = ? AND state IN {ACTIVE_SQL}",
            (unfinished, now, name),
        )
        self._insert_event(
            conn, name, None, "run_crashed", message, to_json("event data", {"engine_pid": pid})
        )
        return True
