"""The pool of a local run that shares its machine with every other local run.

Its requests are rows of the machine's lease table (`machine.py`), admitted by the rules of
`pool.py` across runs (a gang whole or not at all, priority then arrival without overtaking,
suspension while blocked, preemption of lower-priority preemptible holders), each given
specific GPU indices. This run's own releases admit at once; another run's are seen within a
poll (``POLL_SECONDS``), as are requests to give a preemptible reservation back.
"""

from __future__ import annotations

import asyncio
import sqlite3
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


class SharedPool(ResourcePool):
    def __init__(self, capacity: Request | None = None, *, machine: Path | None = None,
                 run: str = "") -> None:
        super().__init__(capacity)
        self.machine = machine or contract.machine_dir()
        self.run = run
        self._table: LeaseTable | None = None  # opened at the first request
        self._asked: dict[int, _Asked] = {}  # waiting lease -> its request, in arrival order
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
        return len(self._asked)

    def others_waiting(self) -> bool:
        """Whether any run of the machine waits for admission (a failed lease table: yes,
        so the restart queues as before)."""
        try:
            return any(row.state == "waiting" for row in self.table.leases())
        except sqlite3.Error:
            return True

    async def acquire(self, request: Request, *, priority: int = 0, label: str = "",
                      on_preempt: Callable[[], None] | None = None) -> Reservation:
        held: dict[int, tuple[int, ...]] = {}
        # Behind a row of its own that waits at this priority or above, a pass could admit
        # this row only after that one, which the last write's pass found did not fit.
        first = next(iter(self._asked.values()), None)
        behind = first is not None and first.priority >= priority
        lease = self.table.enter(run=self.run, label=label, cpu=request.cpu,
                                 memory=request.memory, gpu=request.gpu, priority=priority,
                                 preemptible=on_preempt is not None,
                                 admit=None if behind else self.capacity, admitted=held)
        asked = _Asked(asyncio.get_running_loop().create_future(), request, priority,
                       on_preempt is not None, label)
        self._asked[lease] = asked
        self._sync(held)
        self._keep_polling()
        try:
            lease, gpus = await asked.admitted
        except asyncio.CancelledError:
            self._asked.pop(lease, None)
            if asked.admitted.done() and not asked.admitted.cancelled():
                lease = asked.admitted.result()[0]  # handed another row as it was cancelled
            # Waiting, or admitted just as we were cancelled: either way, gone.
            held = {}
            self.table.remove(lease, admit=self.capacity, admitted=held)
            self._sync(held)
            raise
        reservation = Reservation(self, request, label, priority, on_preempt, seq=lease,
                                  gpus=gpus, lease=lease)
        self._held.add(reservation)
        self._keep_polling()
        return reservation

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
                self._sync()
        except sqlite3.Error as e:
            # Waiters would wait forever: each learns why instead.
            failed = EngineError(f"the machine's lease table {self.table.path} failed: {e} "
                                 f"(set {contract.MACHINE_DIR} to a local folder of yours)")
            for asked in self._asked.values():
                if not asked.admitted.done():
                    asked.admitted.set_exception(failed)

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
        for lease, gpus in held.items():
            asked = self._asked.pop(lease, None)
            if asked is not None and not asked.admitted.done():
                asked.admitted.set_result((lease, gpus))

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
        """Give ``r``'s lease to this pool's first waiter when it asks for the same (a
        fan-out's next call), without a release and an admission pass, if no row of the
        machine waits ahead of it (`LeaseTable.hand_over`)."""
        if not self._asked or r._suspensions or r.preempting:
            return False
        # The first in arrival order: one of its own ahead of it (a higher priority) is a row
        # that waits ahead, so the table refuses then.
        lease, asked = next(iter(self._asked.items()))
        if (asked.request != r.request or asked.priority != r.priority
                or asked.preemptible != (r.on_preempt is not None) or asked.admitted.done()):
            return False
        assert self._table is not None and r.lease is not None  # checked by _release
        if not self._table.hand_over(r.lease, lease, label=asked.label):
            return False
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
