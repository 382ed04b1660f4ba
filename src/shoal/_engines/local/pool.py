"""Admission on the local engine: a pool of CPUs, memory and GPUs that calls reserve.

A call is admitted when its whole request fits (a gang is one request: all of it or nothing),
in order of priority, then arrival; a waiting request is never overtaken by a later one of the
same or lower priority, so a big gang is not starved by a stream of small calls. When the
request at the head cannot fit, reservations of lower priority that said they can be preempted
are asked to give their resources back (lowest priority first, then the most recent), as
Kueue preempts lower-priority workloads; they release when their gang has stopped. A task blocked
awaiting its children *suspends* its reservation (as Ray does for blocked tasks) so a driver
never starves its own children; resuming takes the resources back at once, even if that
briefly oversubscribes the pool.

This pool is this process's alone; `shared_pool.SharedPool`, which the engine uses, applies
the same rules to every local run of the machine.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from shoal import _contract as contract
from shoal.errors import SpecError


@dataclass(frozen=True)
class Request:
    cpu: float = 1.0
    memory: int = 0  # bytes
    gpu: int = 0

    def __add__(self, other: Request) -> Request:
        return Request(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __mul__(self, n: int) -> Request:
        return Request(self.cpu * n, self.memory * n, self.gpu * n)

    def fits(self, free: Request) -> bool:
        eps = 1e-9
        return (self.cpu <= free.cpu + eps and self.memory <= free.memory
                and self.gpu <= free.gpu)


def detect_gpus() -> int:
    """NVIDIA GPUs visible to this machine, without importing a framework."""
    try:
        return sum(1 for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    except OSError:
        return 0


_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?\s*$")
_UNIT = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6,
         "G": 10**9, "T": 10**12}


def machine_capacity() -> Request:
    """This machine's CPUs, memory and GPUs, or what ``SHOAL_MACHINE_CAPACITY`` says of them."""
    detected = {"cpu": float(os.cpu_count() or 1), "memory": psutil.virtual_memory().total,
                "gpu": detect_gpus()}
    raw = os.environ.get(contract.MACHINE_CAPACITY, "")
    fix = f'e.g. {contract.MACHINE_CAPACITY}="cpu=4,memory=16Gi,gpu=1" (each key optional)'
    for item in filter(None, (i.strip() for i in raw.split(","))):
        key, _, value = item.partition("=")
        amount = _AMOUNT.match(value)
        if key.strip() not in detected or amount is None:
            raise SpecError(contract.MACHINE_CAPACITY, raw, f"{item!r} is not cpu=N, "
                            "memory=N[Ki|Mi|Gi|Ti] or gpu=N", fix)
        number = float(amount.group(1)) * _UNIT.get(amount.group(2) or "", 1)
        if key.strip() != "memory" and amount.group(2):
            raise SpecError(contract.MACHINE_CAPACITY, raw, f"{item!r} takes no unit", fix)
        if key.strip() == "cpu" and number <= 0:
            raise SpecError(contract.MACHINE_CAPACITY, raw, "cpu must be more than 0", fix)
        detected[key.strip()] = number
    return Request(cpu=float(detected["cpu"]), memory=int(detected["memory"]),
                   gpu=int(detected["gpu"]))


@dataclass(eq=False)
class Reservation:
    pool: ResourcePool
    request: Request
    label: str
    priority: int = 0
    # Called (once) when a higher-priority request needs these resources; None: not preemptible.
    on_preempt: Callable[[], None] | None = None
    preempting: bool = False
    seq: int = 0
    active: bool = True
    # The machine's GPU indices this reservation holds (for CUDA_VISIBLE_DEVICES); () in a
    # pool that is not shared.
    gpus: tuple[int, ...] = ()
    lease: int | None = None  # its row in the machine's lease table (a shared pool)
    _suspensions: int = field(default=0, repr=False)

    def suspend(self) -> None:
        """Give the resources back while the holder waits (nested: counts suspensions)."""
        self._suspensions += 1
        if self._suspensions == 1 and self.active:
            self.pool._lend(self, True)

    def resume(self) -> None:
        self._suspensions -= 1
        if self._suspensions == 0 and self.active:
            self.pool._lend(self, False)

    def release(self) -> None:
        if self.active:
            self.active = False
            self.pool._held.discard(self)
            self.pool._release(self)


@dataclass(eq=False)
class _Waiter:
    request: Request
    priority: int
    seq: int
    future: asyncio.Future[None]


class ResourcePool:
    def __init__(self, capacity: Request | None = None) -> None:
        self.capacity = capacity or machine_capacity()
        self._used = Request(0.0, 0, 0)
        self._waiters: list[_Waiter] = []
        self._held: set[Reservation] = set()
        self._seq = itertools.count()

    @property
    def free(self) -> Request:
        c, u = self.capacity, self._used
        return Request(c.cpu - u.cpu, c.memory - u.memory, c.gpu - u.gpu)

    def clamp(self, request: Request) -> tuple[Request, list[str]]:
        """Shrink a request larger than the whole pool to the pool, saying what was cut."""
        notes: list[str] = []
        cpu, memory, gpu = request.cpu, request.memory, request.gpu
        cap = self.capacity
        if cpu > cap.cpu:
            notes.append(f"cpu={cpu:g} exceeds this machine's {cap.cpu:g} CPUs: running with "
                         f"{cap.cpu:g}")
            cpu = cap.cpu
        if memory > cap.memory:
            notes.append(f"memory={memory / 2**30:.1f}Gi exceeds this machine's "
                         f"{cap.memory / 2**30:.1f}Gi: running with {cap.memory / 2**30:.1f}Gi")
            memory = cap.memory
        if gpu > cap.gpu:
            notes.append(f"gpu={gpu} but this machine has {cap.gpu} GPUs: GPUs are emulated on CPU"
                         " (the task sees no CUDA device)")
            gpu = cap.gpu
        return Request(cpu, memory, gpu), notes

    async def acquire(self, request: Request, *, priority: int = 0, label: str = "",
                      on_preempt: Callable[[], None] | None = None) -> Reservation:
        """Wait until ``request`` fits (it must already be clamped), then reserve it.

        With ``on_preempt``, the reservation may be preempted by a higher-priority request:
        the callback must then stop the holder, which releases the reservation.
        """
        waiter = _Waiter(request, priority, next(self._seq),
                         asyncio.get_running_loop().create_future())
        bisect.insort(self._waiters, waiter, key=lambda w: (-w.priority, w.seq))
        self._admit()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                self._give_back(request)  # admitted just as we were cancelled
            raise
        reservation = Reservation(self, request, label, priority, on_preempt, seq=waiter.seq)
        self._held.add(reservation)
        return reservation

    async def try_acquire(self, request: Request, *, priority: int = 0, label: str = "",
                          on_preempt: Callable[[], None] | None = None,
                          within: float = 1.0) -> Reservation | None:
        """``request`` reserved now if it fits and nothing waits, else None: it never queues,
        so it never holds up a call that waits (an elastic gang's nodes above its MIN)."""
        if self.others_waiting() or not request.fits(self.free):
            return None
        try:  # a shared pool admits through the machine's table: another run may come first
            return await asyncio.wait_for(
                self.acquire(request, priority=priority, label=label, on_preempt=on_preempt),
                within)
        except asyncio.TimeoutError:
            return None

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def others_waiting(self) -> bool:
        """Whether any request waits for admission (a gang that restarts keeps its
        reservation only when none does)."""
        return self.waiting > 0

    # -- what a reservation's holder does (a shared pool does it in the lease table) -------
    def _lend(self, r: Reservation, lent: bool) -> None:
        if lent:
            self._give_back(r.request)
        else:
            self._take(r.request)

    def _release(self, r: Reservation) -> None:
        if r._suspensions == 0:
            self._give_back(r.request)

    def close(self) -> None:
        """Nothing to give back: this pool lives and ends with its process."""

    def _admit(self) -> None:
        while self._waiters:
            head = self._waiters[0]
            if head.future.done():
                self._waiters.pop(0)
                continue
            if not head.request.fits(self.free):
                self._preempt_for(head)
                return
            self._waiters.pop(0)
            self._take(head.request)
            head.future.set_result(None)

    def _preempt_for(self, head: _Waiter) -> None:
        """Ask lower-priority preemptible holders to make room for ``head``, if they can."""
        free = self.free
        for r in self._held:
            if r.preempting:  # already on its way out: count it as freed
                free = free + r.request
        if head.request.fits(free):
            return
        candidates = sorted(
            (r for r in self._held if r.on_preempt is not None and not r.preempting
             and r.priority < head.priority and r._suspensions == 0),
            key=lambda r: (r.priority, -r.seq))
        chosen: list[Reservation] = []
        for r in candidates:
            chosen.append(r)
            free = free + r.request
            if head.request.fits(free):
                break
        else:
            return  # even preempting all of them would not make room: preempt nobody
        for r in chosen:
            r.preempting = True
            assert r.on_preempt is not None
            r.on_preempt()

    def _take(self, request: Request) -> None:
        self._used = self._used + request

    def _give_back(self, request: Request) -> None:
        self._used = self._used + request * -1
        self._admit()
