"""The pool of a local run that shares its machine with every other local run.

Its requests are rows of the machine's lease table (`machine.py`), admitted by the rules of
`pool.py` across runs (a gang whole or not at all, priority then arrival without overtaking,
suspension while blocked, preemption of lower-priority preemptible holders), each given
specific GPU indices. This run's own releases admit at once; another run's are seen within a
poll (``POLL_SECONDS``), as are requests to give a preemptible reservation back.

A fan-out of one run asks for the same thing thousands of times. Of the requests of one kind
(the same resources, priority and preemptibility) only the first that waits is a row; the
later ones queue behind it in this pool, in arrival order, and the row is their place in the
machine's queue: when it is admitted its request takes it, and the next request behind gets a
row. A release of that kind hands its lease to the first of them in memory, without a write,
while the row heads the machine's queue and no other run waits at that priority (one read);
otherwise the release goes through the table, which lets that run in. Why: two lease-table
writes a call were a quarter of the engine's time per call in a fan-out (154 us of ~560);
the read costs ~6 us. A held row's label (`shoal queue`'s ACTION) is then brought up to date
at the next poll.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shoal import _contract as contract
from shoal._engines.local.machine import LeaseTable
from shoal._engines.local.pool import Request, Reservation, ResourcePool
from shoal.errors import EngineError

# How often a pool reads the lease table while it waits or holds preemptible reservations.
POLL_SECONDS = 0.2


@dataclass(eq=False)
class _Asked:
    """A request of this pool that waits in the lease table for its admission: the lease it
    is given and that lease's GPUs."""
    admitted: asyncio.Future[tuple[int, tuple[int, ...]]]
    request: Request
    priority: int
    preemptible: bool
    label: str

    @property
    def kind(self) -> tuple[Request, int, bool]:
        """What a lease must be to serve it: requests of one kind share a place in the queue."""
        return self.request, self.priority, self.preemptible


class SharedPool(ResourcePool):
    def __init__(self, capacity: Request | None = None, *, machine: Path | None = None,
                 run: str = "") -> None:
        super().__init__(capacity)
        self.machine = machine or contract.machine_dir()
        self.run = run
        self._table: LeaseTable | None = None  # opened at the first request
        self._asked: dict[int, _Asked] = {}  # waiting lease -> its request, in arrival order
        # Requests with no row, behind this pool's row of their kind (see the module's doc).
        self._behind: dict[tuple[Request, int, bool], deque[_Asked]] = {}
        self._relabel: dict[int, str] = {}  # rows whose holder changed without a write
        self._poller: asyncio.Task[None] | None = None

    @property
    def table(self) -> LeaseTable:
        if self._table is None:
            self._table = LeaseTable(self.machine)
        return self._table

    @property
    def free(self) -> Request:
        held = [r for r in self.table.leases() if r.counted]
        c = self.capacity
        return Request(c.cpu - sum(r.cpu for r in held), c.memory - sum(r.memory for r in held),
                       c.gpu - sum(r.gpu for r in held))

    @property
    def waiting(self) -> int:
        return len(self._asked) + sum(len(q) for q in self._behind.values())

    def others_waiting(self) -> bool:
        """Whether any run of the machine waits for admission (a failed lease table: yes,
        so the restart queues as before)."""
        try:
            return any(row.state == "waiting" for row in self.table.leases())
        except sqlite3.Error:
            return True

    async def acquire(self, request: Request, *, priority: int = 0, label: str = "",
                      on_preempt: Callable[[], None] | None = None) -> Reservation:
        asked = _Asked(asyncio.get_running_loop().create_future(), request, priority,
                       on_preempt is not None, label)
        if not asked.preemptible and any(a.kind == asked.kind for a in self._asked.values()):
            # A row of this pool asking the same waits: queue behind it, no write. (A
            # preemptible request, a gang, is always a row: the table checks its preemption.)
            self._behind.setdefault(asked.kind, deque()).append(asked)
        else:
            self._sync(self._row(asked))
            self._keep_polling()
        try:
            lease, gpus = await asked.admitted
        except asyncio.CancelledError:
            self._drop(asked)
            raise
        reservation = Reservation(self, request, label, priority, on_preempt, seq=lease,
                                  gpus=gpus, lease=lease)
        self._held.add(reservation)
        self._keep_polling()
        return reservation

    def _row(self, asked: _Asked) -> dict[int, tuple[int, ...]]:
        """Make ``asked`` a row of the table, with an admission pass unless a row of this pool
        waits ahead of it at its priority or above (a pass could admit it only after that one,
        which the last write's pass found did not fit); the rows of this pool it admitted."""
        held: dict[int, tuple[int, ...]] = {}
        first = next(iter(self._asked.values()), None)
        behind = first is not None and first.priority >= asked.priority
        lease = self.table.enter(run=self.run, label=asked.label, cpu=asked.request.cpu,
                                 memory=asked.request.memory, gpu=asked.request.gpu,
                                 priority=asked.priority, preemptible=asked.preemptible,
                                 admit=None if behind else self.capacity, admitted=held)
        self._asked[lease] = asked
        return held

    def _drop(self, asked: _Asked) -> None:
        """``asked`` was cancelled: out of the queue, or its lease given back if it had one."""
        if asked.admitted.done() and not asked.admitted.cancelled():
            lease = asked.admitted.result()[0]  # admitted just as it was cancelled
            self._give_back_lease(lease)
            return
        queue = self._behind.get(asked.kind)
        if queue is not None and asked in queue:
            queue.remove(asked)
            if not queue:
                del self._behind[asked.kind]
            return
        row = next((k for k, a in self._asked.items() if a is asked), None)
        if row is None:
            return  # its row was admitted as it was cancelled: `_admitted` passed it on
        nxt = self._next_behind(asked.kind)
        if nxt is not None:  # the row keeps its place for the next request of its kind
            self._asked[row] = nxt
            self._relabel[row] = nxt.label
            return
        del self._asked[row]
        self._give_back_lease(row)

    def _next_behind(self, kind: tuple[Request, int, bool]) -> _Asked | None:
        queue = self._behind.get(kind)
        if not queue:
            return None
        nxt = queue.popleft()
        if not queue:
            del self._behind[kind]
        return nxt

    def _give_back_lease(self, lease: int) -> None:
        held: dict[int, tuple[int, ...]] = {}
        self.table.remove(lease, admit=self.capacity, admitted=held)
        self._sync(held)

    def _keep_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll())

    async def _poll(self) -> None:
        """Admission passes while this pool waits for, or may be asked to give back, leases
        (another run's release or preemption request is seen here)."""
        try:
            while self._asked or any(r.on_preempt is not None and not r.preempting
                                     for r in self._held):
                await asyncio.sleep(POLL_SECONDS)
                self._flush_labels()
                self._sync()
            self._flush_labels()
        except sqlite3.Error as e:
            # Waiters would wait forever: each learns why instead.
            failed = EngineError(f"the machine's lease table {self.table.path} failed: {e} "
                                 f"(set {contract.MACHINE_DIR} to a local folder of yours)")
            behind = [a for q in self._behind.values() for a in q]
            for asked in [*self._asked.values(), *behind]:
                if not asked.admitted.done():
                    asked.admitted.set_exception(failed)

    def _flush_labels(self) -> None:
        if self._relabel and self._table is not None:
            labels, self._relabel = self._relabel, {}
            self._table.relabel(labels)

    def _sync(self, passed: dict[int, tuple[int, ...]] | None = None) -> None:
        """One admission pass over the machine, then this pool's admitted and preempted rows
        acted on. ``passed``: the caller's write just made the pass, and these are the rows of
        this pool it admitted; the table is then read again only for preemption requests
        (rows another run's pass admitted are seen at the next poll)."""
        if passed is None:
            self.table.admit(self.capacity)
            rows = self.table.mine()
            held = {lease: row.gpus for lease, row in rows.items() if row.state == "held"}
        else:
            held = passed
            if not any(r.on_preempt is not None and not r.preempting for r in self._held):
                self._admitted(held)
                return
            rows = self.table.mine()
        self._admitted(held)
        for r in list(self._held):
            row = rows.get(r.lease) if r.lease is not None else None
            if row is not None and row.preempt and not r.preempting and r.on_preempt:
                r.preempting = True
                r.on_preempt()

    def _admitted(self, held: dict[int, tuple[int, ...]]) -> None:
        """Give each admitted row to the request it stands for (a row admitted as its request
        was cancelled goes to the next of its kind, or back); the next request of its kind
        behind it gets a row of its own, which may be admitted at once."""
        todo = list(held.items())
        while todo:
            lease, gpus = todo.pop(0)
            asked = self._asked.pop(lease, None)
            if asked is None:
                continue
            if asked.admitted.done():  # cancelled: the lease is nobody's
                nxt = self._next_behind(asked.kind)
                if nxt is None:
                    more: dict[int, tuple[int, ...]] = {}
                    self.table.remove(lease, admit=self.capacity, admitted=more)
                    todo.extend(more.items())
                    continue
                asked = nxt
                self._relabel[lease] = nxt.label
            asked.admitted.set_result((lease, gpus))
            nxt = self._next_behind(asked.kind)
            if nxt is not None:
                todo.extend(self._row(nxt).items())

    def _lend(self, r: Reservation, lent: bool) -> None:
        if self._table is None or r.lease is None:
            return  # closed: its lease is gone already
        held: dict[int, tuple[int, ...]] = {}
        self._table.set_suspended(r.lease, lent, admit=self.capacity if lent else None,
                                  admitted=held)
        if lent:
            self._sync(held)

    def _release(self, r: Reservation) -> None:
        if self._table is None or r.lease is None:
            return
        if self._hand_over(r):
            return
        held: dict[int, tuple[int, ...]] = {}
        self._table.remove(r.lease, admit=self.capacity, admitted=held)
        self._sync(held)

    def _hand_over(self, r: Reservation) -> bool:
        """Give ``r``'s lease to the first request of this pool of the same kind that waits
        (a fan-out's next call), without a release and an admission pass, if no row of the
        machine waits ahead of that kind's row (`LeaseTable.hand_over`). With more requests
        of the kind behind the row, in memory: the row keeps its place for them."""
        if r._suspensions or r.preempting:
            return False
        kind = (r.request, r.priority, r.on_preempt is not None)
        place = next(((k, a) for k, a in self._asked.items() if a.kind == kind), None)
        if place is None or place[1].admitted.done():
            return False
        lease, asked = place
        assert self._table is not None and r.lease is not None  # checked by _release
        if self._behind.get(kind):  # never preemptible (`acquire`)
            if not self._table.heads_queue(lease, r.priority):
                return False
            nxt = self._next_behind(kind)
            assert nxt is not None
            self._asked[lease] = nxt
            self._relabel[r.lease] = asked.label
            self._relabel[lease] = nxt.label
            asked.admitted.set_result((r.lease, r.gpus))
            return True
        if not self._table.hand_over(r.lease, lease, label=asked.label):
            return False
        self._relabel.pop(r.lease, None)  # the write set its label
        del self._asked[lease]
        asked.admitted.set_result((r.lease, r.gpus))
        return True

    def close(self) -> None:
        """Give back every lease of this pool and stop reading the table."""
        if self._poller is not None:
            self._poller.cancel()
        if self._table is not None:
            self._table.remove_mine()
            self._table.close()
            self._table = None
