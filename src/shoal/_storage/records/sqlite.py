"""The SQLite file under the run records: connections, transactions, retries, opening.

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
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from shoal import _contract as contract
from shoal._storage.private import private_file, private_home
from shoal._storage.records.schema import SCHEMA_VERSION, migrate, schema_version
from shoal.errors import NotFoundError, ShoalSystemError

__all__ = ["RecordsFile"]

T = TypeVar("T")


def _is_busy(err: sqlite3.OperationalError) -> bool:
    text = str(err).lower()
    return "locked" in text or "busy" in text


class RecordsFile:
    """The run records' SQLite file, opened (and migrated) at ``path``; the base of ``Records``.

    Owns the connections (one per thread, a fresh set after ``fork()``) and the one place
    sqlite3 errors become ``ShoalSystemError``: ``_retrying`` for reads, ``_write`` for short
    write transactions. The public record methods live in the subclasses.
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
            # The records' folder is the home (`$SHOAL_HOME/shoal.db`): made private here, the
            # first thing every run and command does; the file 0600 before SQLite opens it
            # (its -wal and -shm files take the database's mode).
            private_home(self.path.parent)
            private_file(self.path)
        except OSError as err:
            raise ShoalSystemError(f"cannot create the folder of the run records: {err}") from err
        self._retrying(self._use_wal)
        version = self._retrying(schema_version)
        if version is not None and version > SCHEMA_VERSION:
            self.close()
            raise ShoalSystemError(
                f"the run records at {self.path} have schema version {version}, newer than this "
                f"Shoal understands ({SCHEMA_VERSION}). Fix: upgrade shoal, or point SHOAL_HOME "
                "at another folder"
            )
        if version != SCHEMA_VERSION:
            self._write(migrate)

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
        """Run ``fn`` in one short write transaction that commits before returning (or in the
        enclosing `batch`, which commits them all at once)."""
        if getattr(self._local, "batch", None) is not None:
            return fn(self._local.batch)

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

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Make the writes of the body one transaction: all or none, one commit.

        The controller groups the handful of writes each task call makes, which matters when a
        fan-out makes hundreds of calls a second. Keep the body short and free of awaits: the
        database is locked for writers until it ends.
        """
        if getattr(self._local, "batch", None) is not None:
            yield  # already inside a batch: join it
            return

        def begin(conn: sqlite3.Connection) -> sqlite3.Connection:
            conn.execute("BEGIN IMMEDIATE")
            return conn

        conn = self._retrying(begin)
        self._local.batch = conn
        try:
            yield
        except BaseException:
            self._local.batch = None
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._local.batch = None
        self._retrying(lambda c: c.execute("COMMIT"))

    def __del__(self) -> None:
        # A connection left to the garbage collector warns from Python 3.13 (ResourceWarning):
        # records dropped without close() (a CLI verb's, say) close what they opened here.
        with contextlib.suppress(Exception):
            if not self._closed and os.getpid() == self._pid:
                self.close()

    def close(self) -> None:
        """Close every thread's connection; the object cannot be used afterwards."""
        with self._lock:
            conns, self._conns = self._conns, []
            self._closed = True
        if os.getpid() == self._pid:
            for conn in conns:
                conn.close()

    # -- lookups every kind of record needs -----------------------------------------------
    @staticmethod
    def _run_exists(conn: sqlite3.Connection, name: str) -> bool:
        return conn.execute("SELECT 1 FROM runs WHERE name = ?", (name,)).fetchone() is not None

    def _run_not_found(self, name: str) -> NotFoundError:
        return NotFoundError(
            f"no run named {name!r} in {self.path}. Fix: see `shoal runs` for the recent runs"
        )
