"""Local run records: runs, actions, attempts and events in one SQLite file.

Several processes use the file at once: every `shoal run` engine writes its own run while
`shoal runs` and `shoal logs` read. What makes that safe:

- WAL mode: readers never block the writer and the writer never blocks readers.
- Every write is one short ``BEGIN IMMEDIATE`` transaction that commits at once. Taking the
  write lock up front makes a second writer wait (``busy_timeout``) instead of failing when a
  read transaction tries to become a write one (SQLITE_BUSY_SNAPSHOT, which SQLite's busy
  handler cannot retry). A write that still meets a busy database is retried as a whole until
  the timeout, so callers never see "database is locked" under normal contention.
- ``synchronous=NORMAL``: in WAL mode a commit survives the death of the process (an engine
  killed with SIGKILL keeps everything it wrote); only a power loss can drop the last commits.
- One connection per thread: a sqlite3 connection must not be used by two threads at once,
  and a forked child opens its own (SQLite forbids carrying a connection across ``fork()``).

A run whose engine process died cannot record its own end; ``Records.reap_dead_runs`` finds
such runs on this host and marks them ``crashed``. Readers call it before they list runs.

The schema is versioned (``meta.schema_version``); ``_MIGRATIONS`` upgrades an older file in
place, and a file written by a newer Shoal is refused rather than misread.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from shoal._runtime import contract
from shoal.errors import NotFoundError, ShoalSystemError, SpecError

__all__ = [
    "ACTION_STATES",
    "ATTEMPT_STATES",
    "RUN_STATES",
    "SCHEMA_VERSION",
    "TERMINAL_STATES",
    "ActionRecord",
    "AttemptRecord",
    "EventRecord",
    "Records",
    "RunRecord",
]

SCHEMA_VERSION = 1

RUN_STATES = frozenset({"queued", "running", "succeeded", "failed", "cancelled", "crashed"})
ACTION_STATES = frozenset({"queued", "running", "succeeded", "failed", "cancelled", "cached"})
ATTEMPT_STATES = frozenset(
    {"running", "succeeded", "failed", "crashed", "cancelled", "timed_out", "preempted"}
)
# Every state but "queued" and "running" is terminal, whichever kind of record it belongs to.
TERMINAL_STATES = (RUN_STATES | ACTION_STATES | ATTEMPT_STATES) - {"queued", "running"}
_ACTIVE = "('queued', 'running')"  # SQL form of the non-terminal states

# A reused pid has a different start time; psutil reports it to 1/100 s, so 1 s is generous.
_START_TIME_TOLERANCE_S = 1.0

T = TypeVar("T")


# --- records --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunRecord:
    name: str
    task: str
    code_file: str
    engine: str
    store: str
    inputs: dict[str, Any]
    state: str
    error: str | None
    outputs: Any
    created_at: float
    started_at: float | None
    ended_at: float | None
    engine_pid: int | None
    engine_host: str | None
    engine_started_at: float | None  # the engine's process start time: tells a reused pid apart
    heartbeat_at: float | None
    cancel_requested: bool
    resumed_from: str | None  # the run this one resumes (`shoal run --resume`)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class ActionRecord:
    run: str
    action_id: str
    parent_id: str | None
    task: str
    env: str
    state: str
    inputs: dict[str, Any]
    outputs: Any
    error: str | None
    cache_key: str | None
    cache_hit: bool
    created_at: float
    started_at: float | None
    ended_at: float | None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class AttemptRecord:
    run: str
    action_id: str
    attempt: int
    state: str
    pid: int | None
    log_path: str | None
    exit_code: int | None
    signal: str | None  # a signal name, e.g. "SIGKILL"
    error: str | None
    started_at: float
    ended_at: float | None


@dataclass(frozen=True)
class EventRecord:
    id: int
    run: str
    action_id: str | None
    at: float
    kind: str
    message: str
    data: Any


def _columns(record: type) -> str:
    return ", ".join(f.name for f in fields(record))


_RUN_COLS = _columns(RunRecord)
_ACTION_COLS = _columns(ActionRecord)
_ATTEMPT_COLS = _columns(AttemptRecord)
_EVENT_COLS = _columns(EventRecord)


def _dumps(what: str, value: object) -> str:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be JSON-serializable for the run records: {err}") from err


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _run(row: sqlite3.Row) -> RunRecord:
    d = dict(row)
    d["inputs"] = _loads(d["inputs"])
    d["outputs"] = _loads(d["outputs"])
    d["cancel_requested"] = bool(d["cancel_requested"])
    return RunRecord(**d)


def _action(row: sqlite3.Row) -> ActionRecord:
    d = dict(row)
    d["inputs"] = _loads(d["inputs"])
    d["outputs"] = _loads(d["outputs"])
    d["cache_hit"] = bool(d["cache_hit"])
    return ActionRecord(**d)


def _attempt(row: sqlite3.Row) -> AttemptRecord:
    return AttemptRecord(**dict(row))


def _event(row: sqlite3.Row) -> EventRecord:
    d = dict(row)
    d["data"] = _loads(d["data"])
    return EventRecord(**d)


def _check_state(kind: str, state: str, allowed: frozenset[str]) -> None:
    if state not in allowed:
        raise ValueError(f"{kind} state {state!r} is not one of {sorted(allowed)}")


# --- schema ---------------------------------------------------------------------------------
_SCHEMA_V1 = (
    """CREATE TABLE runs (
        name TEXT PRIMARY KEY,
        task TEXT NOT NULL,
        code_file TEXT NOT NULL,
        engine TEXT NOT NULL,
        store TEXT NOT NULL,
        inputs TEXT NOT NULL,
        state TEXT NOT NULL,
        error TEXT,
        outputs TEXT,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        engine_pid INTEGER,
        engine_host TEXT,
        engine_started_at REAL,
        heartbeat_at REAL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        resumed_from TEXT
    )""",
    "CREATE INDEX runs_by_created_at ON runs (created_at)",
    "CREATE INDEX runs_by_state ON runs (state)",
    """CREATE TABLE actions (
        run TEXT NOT NULL REFERENCES runs (name),
        action_id TEXT NOT NULL,
        parent_id TEXT,
        task TEXT NOT NULL,
        env TEXT NOT NULL,
        state TEXT NOT NULL,
        inputs TEXT NOT NULL,
        outputs TEXT,
        error TEXT,
        cache_key TEXT,
        cache_hit INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        PRIMARY KEY (run, action_id)
    )""",
    """CREATE TABLE attempts (
        run TEXT NOT NULL,
        action_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        state TEXT NOT NULL,
        pid INTEGER,
        log_path TEXT,
        exit_code INTEGER,
        signal TEXT,
        error TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        PRIMARY KEY (run, action_id, attempt),
        FOREIGN KEY (run, action_id) REFERENCES actions (run, action_id)
    )""",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run TEXT NOT NULL REFERENCES runs (name),
        action_id TEXT,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT
    )""",
    "CREATE INDEX events_by_run ON events (run, id)",
)

# _MIGRATIONS[n] upgrades a version-n file to version n + 1, inside the caller's transaction.
# A fresh file gets _SCHEMA_V1 and then every migration, so there is one path to each version.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}


def _schema_version(conn: sqlite3.Connection) -> int | None:
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone():
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else None
    return None


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to SCHEMA_VERSION; runs inside a write transaction."""
    version = _schema_version(conn)
    if version == SCHEMA_VERSION:
        return  # another process got there first
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    if version is None:
        for statement in _SCHEMA_V1:
            conn.execute(statement)
        version = 1
    while version < SCHEMA_VERSION:
        _MIGRATIONS[version](conn)
        version += 1
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(version),)
    )


# --- processes ------------------------------------------------------------------------------
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


def _is_busy(err: sqlite3.OperationalError) -> bool:
    text = str(err).lower()
    return "locked" in text or "busy" in text


def _make_run_name() -> str:
    # UTC so names sort by time across time zones and DST changes.
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"r-{stamp}-{secrets.token_hex(2)}"


# --- the records ----------------------------------------------------------------------------
class Records:
    """The run records of this machine, in ``path`` (default ``$SHOAL_HOME/shoal.db``).

    Safe to share between threads of a process (each thread gets its own connection) and to
    open from many processes at once. Names passed to the writing methods are exact; the
    user-facing ``get_run`` and ``request_cancel`` also accept a unique prefix.
    """

    def __init__(self, path: str | Path | None = None, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path).expanduser() if path is not None else contract.home() / "shoal.db"
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._inherited: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ShoalSystemError(f"cannot create the folder of the run records: {err}") from err
        self._retrying(self._use_wal)
        version = self._retrying(_schema_version)
        if version is not None and version > SCHEMA_VERSION:
            raise ShoalSystemError(
                f"the run records at {self.path} have schema version {version}, newer than this "
                f"Shoal understands ({SCHEMA_VERSION}). Fix: upgrade shoal, or point SHOAL_HOME "
                "at another folder"
            )
        if version != SCHEMA_VERSION:
            self._write(_migrate)

    # -- connections ----------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise ShoalSystemError(f"the run records at {self.path} were closed")
        if os.getpid() != self._pid:
            # A forked child must not touch its parent's connections, not even to close them
            # (closing could disturb the parent's locks); keep them referenced and start over.
            with self._lock:
                self._inherited.extend(self._conns)
                self._conns = []
                self._local = threading.local()
                self._pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _open(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread=False only
        # so that close() may close every thread's connection; each is used by one thread.
        conn = sqlite3.connect(
            str(self.path),
            timeout=self._busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        if mode != "wal":
            raise ShoalSystemError(
                f"the run records at {self.path} cannot use SQLite's WAL mode (got {mode!r}). "
                "Fix: keep SHOAL_HOME on a local disk, not a network filesystem"
            )

    def _retrying(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on this thread's connection; the one place sqlite3 errors are translated.

        A busy database is retried until the busy timeout: the busy handler covers most
        contention, but not all of it (changing the journal mode, a WAL being reset).
        """
        deadline = time.monotonic() + self._busy_timeout_s
        delay = 0.002
        while True:
            conn = self._conn()
            try:
                return fn(conn)
            except sqlite3.OperationalError as err:
                if _is_busy(err) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
                    continue
                raise ShoalSystemError(f"the run records at {self.path}: {err}") from err
            except sqlite3.Error as err:
                raise ShoalSystemError(f"the run records at {self.path}: {err}") from err

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one short write transaction that commits before returning."""

        def transaction(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return self._retrying(transaction)

    def close(self) -> None:
        """Close every thread's connection; the object cannot be used afterwards."""
        with self._lock:
            conns, self._conns = self._conns, []
            self._closed = True
        if os.getpid() == self._pid:
            for conn in conns:
                conn.close()

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

    @staticmethod
    def _run_exists(conn: sqlite3.Connection, name: str) -> bool:
        return conn.execute("SELECT 1 FROM runs WHERE name = ?", (name,)).fetchone() is not None

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
    ) -> RunRecord:
        """Record a new run in state ``queued``; ``name=None`` picks a fresh unique name.

        ``engine_pid``/``engine_host`` default to this process and ``socket.gethostname()``;
        they are what ``reap_dead_runs`` checks. A name already taken is a ``SpecError``.
        """
        pid = os.getpid() if engine_pid is None else engine_pid
        host = socket.gethostname() if engine_host is None else engine_host
        if pid <= 0:
            raise ValueError(f"engine_pid={pid}: must be a positive process id")
        started = _process_start_time(pid) if host == socket.gethostname() else None
        inputs_json = _dumps("run inputs", dict(inputs))

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
        row = conn.execute(f"SELECT {_RUN_COLS} FROM runs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise self._run_not_found(name)
        return _run(row)

    def _run_not_found(self, name: str) -> NotFoundError:
        return NotFoundError(
            f"no run named {name!r} in {self.path}. Fix: see `shoal runs` for the recent runs"
        )

    def set_run_state(
        self, name: str, state: str, *, error: str | None = None, outputs: object = None
    ) -> bool:
        """Move a run to ``state``; returns False (and changes nothing) if it already ended.

        A terminal state is final, so a late write (say, from an engine the reaper gave up on)
        cannot overwrite how the run ended. ``error`` replaces the stored error (None clears
        it); ``outputs=None`` keeps the stored outputs. Entering ``running`` sets
        ``started_at``, entering a terminal state sets ``ended_at``.
        """
        _check_state("run", state, RUN_STATES)
        outputs_json = None if outputs is None else _dumps("run outputs", outputs)

        def update(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cur = conn.execute(
                "UPDATE runs SET state = ?, error = ?, outputs = COALESCE(?, outputs),"
                " started_at = CASE WHEN ? AND started_at IS NULL THEN ? ELSE started_at END,"
                " ended_at = CASE WHEN ? THEN ? ELSE ended_at END"
                f" WHERE name = ? AND state IN {_ACTIVE}",
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
                f"UPDATE runs SET cancel_requested = 1 WHERE name = ? AND state IN {_ACTIVE}",
                (run.name,),
            )
            if cur.rowcount:
                self._insert_event(
                    conn, run.name, None, "cancel_requested", "cancellation requested", None
                )
            return bool(cur.rowcount)

        return self._write(update)

    def cancel_requested(self, name: str) -> bool:
        def read(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT cancel_requested FROM runs WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise self._run_not_found(name)
            return bool(row[0])

        return self._retrying(read)

    def get_run(self, name: str) -> RunRecord:
        """The run named ``name``, or the only run whose name starts with ``name``."""

        def read(conn: sqlite3.Connection) -> RunRecord:
            row = conn.execute(f"SELECT {_RUN_COLS} FROM runs WHERE name = ?", (name,)).fetchone()
            if row is not None:
                return _run(row)
            rows = (
                []
                if not name
                else conn.execute(
                    f"SELECT {_RUN_COLS} FROM runs WHERE substr(name, 1, ?) = ?"
                    " ORDER BY created_at DESC LIMIT 6",
                    (len(name), name),
                ).fetchall()
            )
            if len(rows) == 1:
                return _run(rows[0])
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
            _check_state("run", state, RUN_STATES)
        query = f"SELECT {_RUN_COLS} FROM runs"
        params: list[object] = []
        if state is not None:
            query += " WHERE state = ?"
            params.append(state)
        query += " ORDER BY created_at DESC, name DESC"
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        rows = self._retrying(lambda c: c.execute(query, params).fetchall())
        return [_run(r) for r in rows]

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
                f" WHERE state IN {_ACTIVE} AND engine_host = ? AND engine_pid IS NOT NULL",
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
            f" WHERE name = ? AND state IN {_ACTIVE}",
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
            f" WHERE run = ? AND state IN {_ACTIVE}",
            (unfinished, now, name),
        )
        self._insert_event(
            conn, name, None, "run_crashed", message, _dumps("event data", {"engine_pid": pid})
        )
        return True

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
    ) -> ActionRecord:
        """Record a new action in state ``queued``, or return the existing one unchanged.

        Get-or-create, so that an engine may repeat the call safely. The existing record is
        returned as it is (compare its ``state``/``created_at`` to tell); one recorded for a
        different task under the same id is a bug in the caller (``ShoalSystemError``).
        """
        inputs_json = _dumps("action inputs", dict(inputs))

        def insert(conn: sqlite3.Connection) -> ActionRecord:
            row = conn.execute(
                f"SELECT {_ACTION_COLS} FROM actions WHERE run = ? AND action_id = ?",
                (run, action_id),
            ).fetchone()
            if row is not None:
                existing = _action(row)
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
                " cache_key, created_at) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
                (run, action_id, parent_id, task, env, inputs_json, cache_key, time.time()),
            )
            return self._select_action(conn, run, action_id)

        return self._write(insert)

    def _select_action(self, conn: sqlite3.Connection, run: str, action_id: str) -> ActionRecord:
        row = conn.execute(
            f"SELECT {_ACTION_COLS} FROM actions WHERE run = ? AND action_id = ?",
            (run, action_id),
        ).fetchone()
        if row is None:
            raise self._action_not_found(conn, run, action_id)
        return _action(row)

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
        _check_state("action", state, ACTION_STATES)
        outputs_json = None if outputs is None else _dumps("action outputs", outputs)
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

    def list_actions(self, run: str) -> list[ActionRecord]:
        """The run's actions in the order they were created."""

        def read(conn: sqlite3.Connection) -> list[ActionRecord]:
            rows = conn.execute(
                f"SELECT {_ACTION_COLS} FROM actions WHERE run = ? ORDER BY created_at, action_id",
                (run,),
            ).fetchall()
            if not rows and not self._run_exists(conn, run):
                raise self._run_not_found(run)
            return [_action(r) for r in rows]

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
        _check_state("attempt", state, ATTEMPT_STATES - {"running"})

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
        query = f"SELECT {_ATTEMPT_COLS} FROM attempts WHERE run = ?"
        params: list[object] = [run]
        if action_id is not None:
            query += " AND action_id = ?"
            params.append(action_id)
        query += " ORDER BY started_at, action_id, attempt"
        rows = self._retrying(lambda c: c.execute(query, params).fetchall())
        return [_attempt(r) for r in rows]

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
        data_json = None if data is None else _dumps("event data", data)

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
            query = f"SELECT {_EVENT_COLS} FROM events WHERE run = ? AND id > ? ORDER BY id"
            params: list[object] = [run, after_id]
            if limit is not None:
                query += " LIMIT ?"
                params.append(limit)
            rows = conn.execute(query, params).fetchall()
            if not rows and not self._run_exists(conn, run):
                raise self._run_not_found(run)
            return [_event(r) for r in rows]

        return self._retrying(read)
