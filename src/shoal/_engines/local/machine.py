"""The machine's lease table: one admission shared by every local run of this machine.

Each local run's pool (`shared_pool.py`) writes its requests here as rows of one SQLite
file: a row is *waiting* until an admission pass finds it fits, then *held* (with the GPU
indices it was given) until its holder deletes it. Any process may run a pass, and each pass
admits every waiting row that fits in order of priority, then arrival (no overtaking),
whoever it belongs to; the owner sees its row held at its next poll. When the head of the
queue does not fit, lower-priority preemptible held rows are marked ``preempt``: their owner
polls that column and stops the holder, which deletes the row. A holder may give its held
row to a waiting row of its own asking for the same that heads the queue (`hand_over`),
which is what a release and a pass would do, without the pass.

Every row names its holder process by pid and start time (as the run records do for crashed
runs): a pass that finds the holder gone deletes its rows, so a crashed run's reservations
are released by the next reader (an admission pass looks every ``REAP_EVERY_S``, a reader of
the whole table every time).

The folder is per user, not per ``SHOAL_HOME``: runs with different homes share a machine
(see `contract.machine_dir`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from shoal import _contract as contract
from shoal._engines.local.pool import Request
from shoal.errors import SpecError

# A reused pid has a different start time; psutil reports it to 1/100 s.
_START_TOLERANCE_S = 1.0
# An admission pass looks for dead holders at most this often: each look asks the kernel about
# every other holder process, and a pool makes two passes a call. A dead holder's rows are
# freed within this long of its death (a reader of the whole table looks every time).
REAP_EVERY_S = 0.2
# Waiting rows an admission pass reads at once (`LeaseTable._queue`).
_QUEUE_PAGE = 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pid INTEGER NOT NULL, started REAL NOT NULL, owner TEXT NOT NULL,
    run TEXT NOT NULL, label TEXT NOT NULL,
    cpu REAL NOT NULL, memory INTEGER NOT NULL, gpu INTEGER NOT NULL,
    priority INTEGER NOT NULL, preemptible INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'waiting',
    gpus TEXT NOT NULL DEFAULT '',
    suspended INTEGER NOT NULL DEFAULT 0,
    preempt INTEGER NOT NULL DEFAULT 0,
    since REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Lease:
    id: int
    pid: int
    started: float
    owner: str  # the pool (one per run) that asked for it
    run: str
    label: str
    cpu: float
    memory: int
    gpu: int
    priority: int
    preemptible: bool
    state: str  # "waiting" | "held"
    gpus: tuple[int, ...]
    suspended: bool
    preempt: bool
    since: float

    @property
    def counted(self) -> bool:
        """Whether the row takes resources now (held and not lent while its task waits)."""
        return self.state == "held" and not self.suspended


def _lease(row: tuple[Any, ...]) -> Lease:
    (id_, pid, started, owner, run, label, cpu, memory, gpu, priority, preemptible, state, gpus,
     suspended, preempt, since) = row
    return Lease(id_, pid, started, owner, run, label, float(cpu), memory, gpu, priority,
                 bool(preemptible), state, _gpus(gpus), bool(suspended), bool(preempt), since)


def _gpus(text: str) -> tuple[int, ...]:
    return tuple(int(g) for g in text.split(",")) if text else ()


def holder_alive(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started at ``started``."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return bool(abs(proc.create_time() - started) <= _START_TOLERANCE_S)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process that exists: assume it holds
        return True


def this_process() -> tuple[int, float]:
    pid = os.getpid()
    return pid, psutil.Process(pid).create_time()


class LeaseTable:
    """``<folder>/leases.db``: the lease rows of every local run of this machine."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or contract.machine_dir()
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.folder == contract.default_machine_dir() and \
                self.folder.stat().st_uid != os.getuid():
            raise SpecError(contract.MACHINE_DIR, str(self.folder),
                            "belongs to another user, who could then admit or evict this "
                            "user's runs", f"set {contract.MACHINE_DIR} to a folder of yours "
                            "(or one the users sharing this machine trust)")
        self.path = self.folder / "leases.db"
        self.pid, self.started = this_process()
        self.owner = secrets.token_hex(8)
        self._next_reap = 0.0  # monotonic time of the next pass that looks for dead holders
        # Used from the engine's event-loop thread; `shoal queue` reads from its own process.
        self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(_SCHEMA)
        self._conn.execute("CREATE INDEX IF NOT EXISTS leases_queue "
                           "ON leases (state, priority DESC, id)")

    def close(self) -> None:
        self._conn.close()

    def __del__(self) -> None:
        # A connection left to the garbage collector warns from Python 3.13; a forked child
        # leaves its parent's alone.
        with contextlib.suppress(Exception):
            if os.getpid() == self.pid:
                self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- a holder's own rows -------------------------------------------------------------
    def enter(self, *, run: str, label: str, cpu: float, memory: int, gpu: int,
              priority: int, preemptible: bool, admit: Request | None = None,
              admitted: dict[int, tuple[int, ...]] | None = None) -> int:
        """A new waiting row (its arrival order is its id); with ``admit``, an admission pass
        for that capacity in the same transaction, which adds this table's rows it made held
        to ``admitted`` (as `remove` and `set_suspended`)."""
        with self._write() as c:
            cur = c.execute(
                "INSERT INTO leases (pid, started, owner, run, label, cpu, memory, gpu, priority,"
                " preemptible, since) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (self.pid, self.started, self.owner, run, label, cpu, memory, gpu, priority,
                 int(preemptible), time.time()))
            assert cur.lastrowid is not None
            if admit is not None:
                self._admit(c, admit, admitted)
            return int(cur.lastrowid)

    def hand_over(self, lease_id: int, waiter: int, *, label: str) -> bool:
        """Give this table's held row ``lease_id`` to its waiting row ``waiter`` whose request,
        priority and preemptibility are the same, in place of a release and an admission pass:
        the waiter's row goes and the held one takes its label. Only while the waiter heads
        the queue (no row of any run waits ahead of it: a higher priority, or the same and an
        earlier arrival) and the held row is neither lent nor asked to go, so admission keeps
        the order a pass would; False, and nothing changed, otherwise. The capacity in use
        does not change, so a pass would admit nothing else."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            kept = c.execute(
                "UPDATE leases SET label = ?, since = ? WHERE id = ? AND owner = ? AND "
                "state = 'held' AND suspended = 0 AND preempt = 0",
                (label, time.time(), lease_id, self.owner)).rowcount == 1
            # The head of the queue, by the index a pass reads it by (one seek).
            head = c.execute("SELECT id FROM leases WHERE state = 'waiting' "
                             "ORDER BY priority DESC, id LIMIT 1").fetchone() if kept else None
            handed = head is not None and head[0] == waiter and c.execute(
                "DELETE FROM leases WHERE id = ?", (waiter,)).rowcount == 1
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT" if handed else "ROLLBACK")
        return handed

    def heads_queue(self, lease_id: int, priority: int) -> bool:
        """Whether this table's waiting row ``lease_id`` (at ``priority``) heads the machine's
        queue and no row of another run waits at that priority behind it: then a lease of
        this table that asks the same may pass to its request without a write, as a release
        and a pass would (`shared_pool.SharedPool._hand_over`), and no other run waits
        longer for it. One read, no lock held."""
        c = self._conn
        head = c.execute("SELECT id FROM leases WHERE state = 'waiting' "
                         "ORDER BY priority DESC, id LIMIT 1").fetchone()
        if head is None or head[0] != lease_id:
            return False
        other = c.execute("SELECT 1 FROM leases WHERE state = 'waiting' AND priority = ? "
                          "AND owner != ? LIMIT 1", (priority, self.owner)).fetchone()
        return other is None

    def relabel(self, labels: dict[int, str]) -> None:
        """Set the label of this table's rows ``labels`` names (their holder or first waiter
        changed in memory); rows gone since are skipped."""
        now = time.time()
        with self._write() as c:
            c.executemany("UPDATE leases SET label = ?, since = CASE state WHEN 'held' THEN ? "
                          "ELSE since END WHERE id = ? AND owner = ?",
                          [(label, now, lease, self.owner) for lease, label in labels.items()])

    def remove(self, lease_id: int, admit: Request | None = None,
               admitted: dict[int, tuple[int, ...]] | None = None) -> None:
        with self._write() as c:
            c.execute("DELETE FROM leases WHERE id = ?", (lease_id,))
            if admit is not None:
                self._admit(c, admit, admitted)

    def remove_mine(self) -> None:
        with self._write() as c:
            c.execute("DELETE FROM leases WHERE owner = ?", (self.owner,))

    def set_suspended(self, lease_id: int, suspended: bool, admit: Request | None = None,
                      admitted: dict[int, tuple[int, ...]] | None = None) -> None:
        with self._write() as c:
            c.execute("UPDATE leases SET suspended = ? WHERE id = ?", (int(suspended), lease_id))
            if admit is not None:
                self._admit(c, admit, admitted)

    def mine(self) -> dict[int, Lease]:
        """This table's (this pool's) held rows."""
        rows = self._conn.execute("SELECT * FROM leases WHERE owner = ? AND state = 'held'",
                                  (self.owner,)).fetchall()
        return {lease.id: lease for lease in map(_lease, rows)}

    # -- everyone's rows -----------------------------------------------------------------
    def leases(self) -> list[Lease]:
        """Every live row, in arrival order (rows of dead holders are deleted first)."""
        with self._write() as c:
            return self._live(c)

    def _live(self, c: sqlite3.Connection) -> list[Lease]:
        self._reap(c)
        return [_lease(r) for r in c.execute("SELECT * FROM leases ORDER BY id").fetchall()]

    def _reap(self, c: sqlite3.Connection) -> None:
        """Delete the rows of holders that are gone (a crashed or killed run)."""
        for pid, started in c.execute("SELECT DISTINCT pid, started FROM leases").fetchall():
            if (pid, started) != (self.pid, self.started) and not holder_alive(pid, started):
                c.execute("DELETE FROM leases WHERE pid = ? AND started = ?", (pid, started))

    def admit(self, capacity: Request) -> None:
        """One admission pass over the whole machine (see the module's docstring)."""
        with self._write() as c:
            self._admit(c, capacity)

    def _admit(self, c: sqlite3.Connection, capacity: Request,
               admitted: dict[int, tuple[int, ...]] | None = None) -> None:
        now = time.monotonic()
        if now >= self._next_reap:
            self._reap(c)
            self._next_reap = now + REAP_EVERY_S
        # Held rows are few (they fit the machine); waiting ones are read only up to the
        # first that does not fit, so a long queue costs a pass little.
        holding = [_lease(r) for r in
                   c.execute("SELECT * FROM leases WHERE state = 'held'").fetchall()]
        held = [r for r in holding if r.counted]
        cpu = capacity.cpu - sum(r.cpu for r in held)
        memory = capacity.memory - sum(r.memory for r in held)
        # GPUs of a suspended holder are lent only when no other GPU is free.
        taken = {g for r in held for g in r.gpus}
        lent = {g for r in holding if r.suspended for g in r.gpus}
        for w in self._queue(c):
            free = [g for g in range(capacity.gpu) if g not in taken]
            if not (w.cpu <= cpu + 1e-9 and w.memory <= memory and w.gpu <= len(free)):
                self._preempt_for(c, w, holding, capacity)
                return
            free.sort(key=lambda g: g in lent)
            gpus = sorted(free[:w.gpu])
            c.execute("UPDATE leases SET state = 'held', gpus = ?, since = ? WHERE id = ?",
                      (",".join(map(str, gpus)), time.time(), w.id))
            if admitted is not None and w.owner == self.owner:
                admitted[w.id] = tuple(gpus)
            cpu, memory = cpu - w.cpu, memory - w.memory
            taken.update(gpus)

    @staticmethod
    def _queue(c: sqlite3.Connection) -> Iterator[Lease]:
        """The waiting rows in admission order, read a page at a time: a fan-out of thousands
        queues thousands of rows, and a pass reads only up to the first that does not fit.
        A page is read anew after the rows before it were admitted (state ``held``), not
        while they are updated."""
        while True:
            page = c.execute("SELECT * FROM leases WHERE state = 'waiting' "
                             "ORDER BY priority DESC, id LIMIT ?", (_QUEUE_PAGE,)).fetchall()
            yield from map(_lease, page)
            if len(page) < _QUEUE_PAGE:
                return

    def _preempt_for(self, c: sqlite3.Connection, head: Lease, rows: list[Lease],
                     capacity: Request) -> None:
        """Mark lower-priority preemptible holders for ``head``, if that makes room."""
        going = [r for r in rows if r.counted and not r.preempt]
        candidates = sorted((r for r in going if r.preemptible and r.priority < head.priority),
                            key=lambda r: (r.priority, -r.id))

        def fits(staying: list[Lease]) -> bool:
            return (head.cpu <= capacity.cpu - sum(r.cpu for r in staying) + 1e-9
                    and head.memory <= capacity.memory - sum(r.memory for r in staying)
                    and head.gpu <= capacity.gpu - sum(r.gpu for r in staying))

        if fits(going):  # rows already asked to go make room: wait for them
            return
        chosen: list[Lease] = []
        for r in candidates:
            chosen.append(r)
            if fits([s for s in going if s not in chosen]):
                break
        else:
            return  # even preempting all of them would not make room: preempt nobody
        for r in chosen:
            c.execute("UPDATE leases SET preempt = 1 WHERE id = ?", (r.id,))
