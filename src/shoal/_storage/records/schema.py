"""What the run records hold: record types, their states, and the SQLite schema.

The four record types (runs, actions, attempts, events) are frozen dataclasses whose field names
are the table columns. The schema is versioned (``meta.schema_version``): ``_MIGRATIONS`` upgrades
an older file in place, and ``Records`` refuses a file written by a newer Shoal rather than
misread it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTION_KINDS",
    "ACTION_STATES",
    "ACTIVE_SQL",
    "ATTEMPT_STATES",
    "RUN_STATES",
    "SCHEMA_VERSION",
    "TERMINAL_STATES",
    "ActionRecord",
    "AttemptRecord",
    "EventRecord",
    "RunRecord",
    "check_state",
    "migrate",
    "schema_version",
]

SCHEMA_VERSION = 3

RUN_STATES = frozenset({"queued", "running", "succeeded", "failed", "cancelled", "crashed"})
# "replayed": a resumed run took the outputs of the same call from the run it resumes.
ACTION_STATES = frozenset({"queued", "running", "succeeded", "failed", "cancelled", "cached",
                           "replayed"})
ATTEMPT_STATES = frozenset(
    {"running", "succeeded", "failed", "crashed", "cancelled", "timed_out", "preempted"}
)
# What an action is: a task call, or one call of a `@shoal.trace` function inside a task.
ACTION_KINDS = frozenset({"task", "trace"})
# Every state but "queued" and "running" is terminal, whichever kind of record it belongs to.
TERMINAL_STATES = (RUN_STATES | ACTION_STATES | ATTEMPT_STATES) - {"queued", "running"}
ACTIVE_SQL = "('queued', 'running')"  # SQL form of the non-terminal states


def check_state(kind: str, state: str, allowed: frozenset[str]) -> None:
    if state not in allowed:
        raise ValueError(f"{kind} state {state!r} is not one of {sorted(allowed)}")


# --- record types ---------------------------------------------------------------------------
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
    # The `shoal.group` path the call was made in, outermost first; () outside any group.
    group_path: tuple[str, ...] = ()
    kind: str = "task"  # one of ACTION_KINDS
    # The `shoal.custom_context` the call was made with; {} without one.
    custom_context: dict[str, str] = field(default_factory=dict)

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
def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """Groups and traces: actions of older files are task calls made outside any group."""
    conn.execute("ALTER TABLE actions ADD COLUMN group_path TEXT")
    conn.execute("ALTER TABLE actions ADD COLUMN kind TEXT NOT NULL DEFAULT 'task'")


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    """Custom contexts: actions of older files were called without one."""
    conn.execute("ALTER TABLE actions ADD COLUMN custom_context TEXT")


_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3}


def schema_version(conn: sqlite3.Connection) -> int | None:
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone():
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else None
    return None


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to SCHEMA_VERSION; runs inside a write transaction."""
    version = schema_version(conn)
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
