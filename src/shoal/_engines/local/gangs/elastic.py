"""Elastic gangs on the local engine: between MIN and MAX nodes, resized while the run goes on.

An elastic gang (``ClusterSpec.elastic``: ``min_replicas < replicas``, or Flyte's
``Elastic(nnodes="MIN:MAX")``) is admitted on one reservation of MIN nodes' worth (the *base*:
all of it or nothing, as a fixed gang is) and takes each node above MIN as a reservation of
its own, only when one fits now (`ResourcePool.try_acquire`: it never queues ahead of another
call). Each node is one launcher process, as in a fixed gang (`gang.GangRunner`).

What changes the gang's size, and what each costs:

    node lost     its launcher's tree ended, or it said nothing for ``monitor_interval``
                  → the others stop their ranks and start again at once with one node fewer
                    (≥ MIN), from the latest committed checkpoint; uses one restart
    node back     capacity fits one more node: a launcher is started beside the training
                  gang (its zygote imports meanwhile) → at the next checkpoint commit the gang
                  stops and starts again with it; never uses a restart
    node lent     a higher-priority call needs what one node above MIN holds: the pool asks
                  that node's reservation back → the gang starts again without it (no restart
                  used) and grows back once the capacity is free again

Every start is told its topology (`gang.GangRunner._restart_in_place`): node ranks follow the
order of the nodes left, and the master is the first of them, so losing node 0 loses no
rendezvous: the engine, not a training node, decides who is in the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal._engines.base import AttemptOutcome, latest_commit
from shoal._engines.local.gangs.failures import start_failure
from shoal._engines.local.gangs.gang import FAILURE_GRACE, Gang, GangRunner
from shoal._engines.local.gangs.limits import fitting_nodes
from shoal._engines.local.gangs.node_link import NodeLink
from shoal._engines.local.gangs.node_net import node_nets
from shoal._spec.call import START_CAUSES
from shoal._storage.call_io import put_call_io
from shoal._storage.private import private_dir
from shoal.errors import FailureInfo, SpecError, StoreError

if TYPE_CHECKING:
    from shoal._engines.local.pool import Request, Reservation

# Seconds between the grower's looks at the pool and at the checkpoint's commits.
GROW_POLL = 0.5
# Seconds a new node's launcher may take to be ready (its zygote's imports) unless the gang
# says (``rendezvous_timeout``: Flyte's ``rdzv_configs`` timeout, 900 s by default there).
JOIN_TIMEOUT = 900.0
# The cause (`START_CAUSES`) of the start after an outcome that changed the gang's size.
CAUSE_OF = {"lost": "node_lost", "lent": "node_lent", "grown": "grown"}
# Seconds to wait, once a rank failed, for a launcher that died with it to be seen: a node
# killed whole is a lost node, not a rank failure of the nodes that lost their peer.
LOSS_SETTLE = 0.3


@dataclass(eq=False)
class Member:
    """One node launcher of an elastic gang."""

    link: NodeLink
    slot: int  # its place on the network (`node_net`): its address
    gpus: tuple[int, ...]
    own: Reservation | None  # a node above MIN holds its own; None: a share of the base


@dataclass
class Outcome:
    kind: str  # succeeded | failed | hung | preempted | lost | lent | grown
    member: Member | None = None  # the node lost or lent
    why: str = ""


class ElasticGangRunner(GangRunner):
    """Runs one attempt of an elastic clustered call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.members: list[Member] = []  # the nodes of the current start, by node rank
        self.spares: list[Member] = []  # launchers ready to join at the next commit
        self.base: Reservation | None = None
        self.base_shares: list[tuple[int, ...]] = []  # base GPU shares no node holds
        self.asked_back: list[Reservation] = []  # nodes' reservations the pool wants back
        self.asked = asyncio.Event()
        self.node_request: Request | None = None
        self.priority = 0
        self._claimed: set[int] = set()  # slots of launchers being started
        self.size = 0  # the nodes of the last start
        # The most nodes a start may have here: replicas, or fewer where the machine holds
        # fewer ranks or addresses (`limits.fitting_nodes`; MIN always fits).
        self.most = self.cluster.replicas
        # A launcher started ahead, its torch imported, that no capacity is held for yet: the
        # next node the gang takes starts from it at once (`_add_spare`), and another is
        # started behind it. One more address than nodes; none where the nodes' networks
        # are named (the fault suite) or their GPUs are real (a spare's come with its share).
        self.standby: Member | None = None
        self._standby_task: asyncio.Task[None] | None = None
        self.addresses = self.cluster.replicas

    def heartbeat(self) -> float:
        return max(0.1, min(1.0, self.cluster.monitor_interval / 3))

    # -- the loop of starts ----------------------------------------------------------------
    async def run(self) -> AttemptOutcome:
        put_call_io(self.store, self.io, self.call.inputs, self.call.custom_context)
        c = self.cluster
        self.node_request, self.priority = self.engine.elastic_admission(self.call)
        self.most = fitting_nodes(c, self.engine.pool.capacity)
        self.nets = node_nets(self.most)
        real_gpus = self.node_request.gpu > 0 and not self.engine.gpus_emulated(
            self.call.task.env)
        if not real_gpus:
            with contextlib.suppress(SpecError):
                self.nets = node_nets(self.most + 1)
        self.addresses = len(self.nets)
        restarts_used, restart, cause = 0, 0, "first_start"
        try:
            while True:
                if self.base is None and not await self._admit(restart):
                    return self.engine.queued_too_long(self.call, self.ref)
                outcome = await self._one_start(restart, cause)
                before = self.size
                if self.call.task.env.profile is not None:
                    await self._summarize_profiles(restart)
                if outcome.kind == "succeeded":
                    return AttemptOutcome(output=self._output(restart))
                if outcome.kind in ("grown", "lent"):  # capacity moved: no restart used
                    self._resized(restart + 1, before, outcome, uses_restart=False,
                                  left=c.max_restarts - restarts_used)
                    restart, cause = restart + 1, CAUSE_OF[outcome.kind]
                    continue
                if outcome.kind == "preempted":
                    await self._let_go()
                    if c.resume_after_preemption:
                        self.engine.notify("gang_preempted", self.ref.action, {
                            "task": self.call.task.name, "restart": restart,
                            "uses_restart": False})
                        restart, cause = restart + 1, "preempted"
                        continue
                failure = (self._lost_failure(restart, outcome) if outcome.kind == "lost"
                           else start_failure(self, restart, preempted=outcome.kind == "preempted"))
                if restarts_used >= c.max_restarts:
                    return AttemptOutcome(failure=failure)
                restarts_used += 1
                left = c.max_restarts - restarts_used
                if outcome.kind == "lost":
                    self._resized(restart + 1, before, outcome, uses_restart=True, left=left)
                    cause = "node_lost"
                else:
                    self.engine.notify("gang_restart", self.ref.action, {
                        "task": self.call.task.name, "restart": restart,
                        "message": failure.message, "rank": failure.rank, "left": left})
                    cause = "preempted" if outcome.kind == "preempted" else "restart"
                restart += 1
        finally:
            await self._let_go()

    async def _admit(self, restart: int) -> bool:
        """The base (MIN nodes) when it fits, then every node above MIN that fits now."""
        c, label = self.cluster, f"{self.ref.action} gang"
        assert self.node_request is not None
        base_request = self.engine.pool.clamp(self.node_request * c.min_nodes)[0]
        self.preempted.clear()
        if restart == 0:  # max_queued_time bounds the attempt's wait only
            self.base = await self.engine.admit_within(
                self.call, base_request, priority=self.priority, label=label,
                on_preempt=self.preempted.set)
            if self.base is None:
                return False
        else:
            self.base = await self.engine.pool.acquire(
                base_request, priority=self.priority, label=label,
                on_preempt=self.preempted.set)
        share = len(self.base.gpus) // c.min_nodes
        self.base_shares = [self.base.gpus[i * share:(i + 1) * share]
                            for i in range(c.min_nodes)]
        self.engine.notify("gang_admitted", self.ref.action,
                           {"task": self.call.task.name, "restart": restart})
        # The first start waits for as many nodes as fit now, not for more to come.
        ready = [self._add_spare(share_, None) for share_ in self._take_shares()]
        for _ in range(self.most - c.min_nodes):
            own = await self._try_node()
            if own is None:
                break
            ready.append(self._add_spare(own.gpus, own))
        await asyncio.gather(*ready)
        return True

    def _take_shares(self) -> list[tuple[int, ...]]:
        shares, self.base_shares = self.base_shares, []
        return shares

    async def _try_node(self) -> Reservation | None:
        """One node's own reservation if it fits now (lent back when the pool asks)."""
        assert self.node_request is not None
        holder: list[Reservation] = []

        def asked_back() -> None:
            self.asked_back.extend(holder)
            self.asked.set()

        own = await self.engine.pool.try_acquire(
            self.node_request, priority=self.priority, label=f"{self.ref.action} gang node",
            on_preempt=asked_back)
        if own is not None:
            holder.append(own)
        return own

    async def _add_spare(self, gpus: tuple[int, ...], own: Reservation | None) -> None:
        """A launcher for one more node, ready (its zygote's imports done) to join: the
        standby if there is one (or one on its way), else a new one."""
        standby = await self._take_standby() if not gpus else None
        if standby is not None:
            standby.own = own
            self.spares.append(standby)
            self._keep_standby()
            return
        spare = await self._new_launcher(gpus, own)
        if spare is not None:
            self.spares.append(spare)

    async def _take_standby(self) -> Member | None:
        task = self._standby_task
        if self.standby is None and task is not None and not task.done():
            await asyncio.shield(task)  # it has been importing a while: sooner than a new one
        standby, self.standby = self.standby, None
        if standby is not None and not standby.link.alive:
            await standby.link.close(timeout=5.0)
            return None
        return standby

    def _keep_standby(self) -> None:
        """Start the next standby launcher in the background, where the gang keeps one."""
        if self.addresses <= self.most or self.standby is not None or (
                self._standby_task is not None and not self._standby_task.done()):
            return

        async def start() -> None:
            try:
                self.standby = await self._new_launcher((), None)
            except OSError as e:  # only a head start lost: the next node starts its own
                print(f"shoal: {self.ref.action}: the elastic gang's standby launcher did "
                      f"not start ({e})", file=sys.stderr)

        self._standby_task = asyncio.ensure_future(start())

    async def _new_launcher(self, gpus: tuple[int, ...],
                            own: Reservation | None) -> Member | None:
        """A node launcher at a free address, once ready; None if it could not start (what it
        held is given back)."""
        used = {m.slot for m in (*self.members, *self.spares)} | self._claimed
        if self.standby is not None:
            used.add(self.standby.slot)
        slot = min(s for s in range(self.addresses) if s not in used)
        self._claimed.add(slot)  # until it is ready and placed
        folder = self.start_dir(0).parent
        private_dir(folder)
        meet = self.cluster.rendezvous_timeout or JOIN_TIMEOUT
        try:
            try:
                link = await self._spawn(slot, 0, 1, 0, 0, folder, gpus,
                                         folder / f"launcher-slot{slot}-{time.time_ns()}.log")
            except BaseException:
                self._give_back(own, gpus)
                raise
            spare = Member(link=link, slot=slot, gpus=gpus, own=own)
            try:
                await asyncio.wait_for(link.ready(), meet)
            except asyncio.TimeoutError:
                print(f"shoal: {self.ref.action}: a new node's launcher was not ready within "
                      f"{meet:g} s (rdzv_configs timeout); the gang goes on without it",
                      file=sys.stderr)
                await self._drop(spare)
                return None
            except BaseException:
                await self._drop(spare)
                raise
        finally:
            self._claimed.discard(slot)
        if not link.alive:  # its launcher failed to start: the node is not there
            await self._drop(spare)
            return None
        return spare

    # -- one start ---------------------------------------------------------------------------
    async def _one_start(self, restart: int, cause: str) -> Outcome:
        c = self.cluster
        for m in [m for m in self.members if not m.link.alive]:
            await self._drop(m)
        if len(self.members) < c.min_nodes:  # below MIN: the base's free shares fill it now
            await asyncio.gather(*(self._add_spare(s, None) for s in self._take_shares()))
        joining = [m for m in self.spares if m.link.alive]
        self.members += joining
        self.spares = [m for m in self.spares if m not in joining]
        self.links = [m.link for m in self.members]
        self.slots = [m.slot for m in self.members]
        self.size = len(self.members)
        gang = await self._start(restart, (), cause)
        self.gang = gang
        self.diagnosis = None
        self._keep_standby()
        try:
            return await self._watch(gang)
        except asyncio.CancelledError:
            await self._stop(gang, c.grace_period)
            raise
        finally:
            for future in gang.ended:
                future.cancel()
            self.gang = None

    async def _watch(self, gang: Gang) -> Outcome:
        waits = {future: i for i, future in enumerate(gang.ended)}
        side: dict[str, asyncio.Future[Any]] = {
            "preempted": asyncio.ensure_future(self.preempted.wait()),
            "hung": asyncio.ensure_future(self._stalled(gang)),
            "silent": asyncio.ensure_future(self._silence(gang)),
            "asked": asyncio.ensure_future(self.asked.wait()),
            "grown": asyncio.ensure_future(self._grow()),
        }
        try:
            pending: set[asyncio.Future[Any]] = set(waits)
            while pending:
                done, pending = await asyncio.wait(pending | set(side.values()),
                                                   return_when=asyncio.FIRST_COMPLETED)
                pending -= set(side.values())
                if side["preempted"] in done:
                    await self._stop(gang, self.cluster.grace_period)
                    return Outcome("preempted")
                if side["silent"] in done:
                    lost = self.members[int(side["silent"].result())]
                    await lost.link.kill()
                    return await self._lose(gang, lost, "its launcher said nothing for "
                                            f"{self.cluster.monitor_interval:g} s")
                if side["asked"] in done:
                    lent = await self._give_asked()
                    if lent is not None:
                        await self._stop(gang, FAILURE_GRACE, keep=True)
                        await self._drop(lent)
                        return Outcome("lent", lent, "a higher-priority call needs its share")
                    side["asked"] = asyncio.ensure_future(self.asked.wait())
                if any(t.result() != 0 for t in done if t in waits):
                    await asyncio.sleep(LOSS_SETTLE)
                    dead = next((m for m in self.members if m.link.proc.returncode is not None),
                                None)
                    if dead is not None:
                        return await self._lose(gang, dead, _ended(dead.link.proc.returncode))
                    await self._diagnose_if_timed_out(gang)
                    await self._stop(gang, FAILURE_GRACE, keep=True)
                    return Outcome("failed")
                if side["hung"] in done:
                    await self._diagnose(gang, "no_progress")
                    await self._stop(gang, FAILURE_GRACE, keep=True)
                    return Outcome("hung")
                if side["grown"] in done and pending:
                    await self._stop(gang, min(self.cluster.grace_period, FAILURE_GRACE),
                                     keep=True)
                    return Outcome("grown")
            return Outcome("succeeded")
        finally:
            for task in side.values():
                task.cancel()
            # Each side task's end (its cancellation, a failed spare) is collected here; a
            # cancellation of this runner itself still propagates.
            await asyncio.gather(*side.values(), return_exceptions=True)

    async def _lose(self, gang: Gang, lost: Member, why: str) -> Outcome:
        """The others stop their ranks; the lost node leaves the gang."""
        node = self.members.index(lost) if lost in self.members else None
        with contextlib.suppress(ProcessLookupError, asyncio.TimeoutError):
            await asyncio.wait_for(lost.link.proc.wait(), 10)
        await self._stop(gang, FAILURE_GRACE, keep=True)
        await self._drop(lost)
        return Outcome("lost", lost, f"node {node} lost ({why})")

    async def _silence(self, gang: Gang) -> int:
        """The index of the first node whose launcher said nothing for monitor_interval."""
        limit = self.cluster.monitor_interval
        while True:
            await asyncio.sleep(self.heartbeat())
            now = time.monotonic()
            for i, m in enumerate(self.members):
                if m.link.proc.returncode is None and now - m.link.heard > limit:
                    return i

    async def _grow(self) -> None:
        """Beside a start: brings nodes up to MAX as capacity fits; returns once one is ready
        and a checkpoint was committed after it was. A node that cannot be started is said
        once; the gang trains on at its size."""
        try:
            await self._grow_until_ready()
        except (OSError, StoreError) as e:
            print(f"shoal: {self.ref.action}: a node could not be added to the elastic gang "
                  f"({e}); it trains on with {len(self.members)} node(s)", file=sys.stderr)
            await asyncio.Event().wait()

    async def _grow_until_ready(self) -> None:
        mark: int | None = None  # the latest commit when the first spare was ready
        while True:
            if len(self.members) + len(self.spares) < self.most:
                if self.base_shares:  # a node of the base was lost: its share is free
                    await self._add_spare(self.base_shares.pop(0), None)
                    continue
                if not self.engine.pool.others_waiting():
                    own = await self._try_node()
                    if own is not None:
                        await self._add_spare(own.gpus, own)
                        continue
            if self.spares:
                latest = await asyncio.to_thread(self._latest_commit)
                if mark is None:
                    mark = latest
                elif latest > mark:
                    return
            await asyncio.sleep(GROW_POLL)

    def _latest_commit(self) -> int:
        from shoal import _contract as contract

        return latest_commit(self.store, contract.checkpoint_uri(
            self.engine.store, self.engine.lineage, self.ref.action))

    async def _give_asked(self) -> Member | None:
        """Give back what the pool asked for: a spare at once (the start goes on), else the
        member holding it, which the caller takes out of the gang."""
        self.asked.clear()
        asked, self.asked_back = self.asked_back, []
        member = None
        for own in asked:
            spare = next((m for m in self.spares if m.own is own), None)
            if spare is not None:
                await self._drop(spare)
                continue
            holder = next((m for m in self.members if m.own is own), None)
            if holder is None:
                own.release()  # already out of the gang
            elif member is None:
                member = holder
            else:  # two at once: the next start gives the second back
                self.asked_back.append(own)
                self.asked.set()
        return member

    # -- the nodes -----------------------------------------------------------------------------
    async def _drop(self, m: Member) -> None:
        """End one node's launcher and give back what it held."""
        for group in (self.members, self.spares):
            if m in group:
                group.remove(m)
        await m.link.close(timeout=5.0)
        self._give_back(m.own, m.gpus)

    def _give_back(self, own: Reservation | None, gpus: tuple[int, ...]) -> None:
        if own is not None:
            own.release()
        elif self.base is not None and self.base.active:
            self.base_shares.append(gpus)

    async def _drop_links(self) -> None:
        """Every launcher ends (a stop that did not answer, the end of the attempt)."""
        await asyncio.gather(*(self._drop(m) for m in (*self.members, *self.spares)))
        self.links, self.slots = [], []

    async def _let_go(self) -> None:
        if self._standby_task is not None:
            self._standby_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._standby_task
            self._standby_task = None
        if self.standby is not None:
            await self.standby.link.close(timeout=5.0)
            self.standby = None
        await self._drop_links()
        if self.base is not None:
            self.base.release()
            self.base = None
        self.base_shares = []
        for own in self.asked_back:
            own.release()
        self.asked_back = []

    # -- what is recorded ------------------------------------------------------------------------
    def _resized(self, restart: int, before: int, outcome: Outcome, *, uses_restart: bool,
                 left: int) -> None:
        cause = CAUSE_OF[outcome.kind]
        # Ready spares join every next start; below MIN, the base's free shares fill it.
        after = max(len(self.members) + len(self.spares), self.cluster.min_nodes)
        if outcome.kind == "grown":
            nodes = [m.slot for m in self.spares]
            reason = f"{len(nodes)} node(s) back, joined at a checkpoint commit"
        else:
            nodes = [outcome.member.slot] if outcome.member is not None else []
            reason = outcome.why
        self.engine.notify("gang_resized", self.ref.action, {
            "task": self.call.task.name, "restart": restart, "from": before, "to": after,
            "cause": cause, "nodes": nodes, "reason": reason, "uses_restart": uses_restart,
            "left": left, "text": START_CAUSES.get(cause, cause)})

    def _lost_failure(self, restart: int, outcome: Outcome) -> FailureInfo:
        c, ref = self.cluster, self.ref
        node = outcome.member.slot if outcome.member is not None else None
        return FailureInfo(
            task=self.call.task.name, action=ref.action, attempt=ref.attempt, kind="crash",
            message=f"{outcome.why} (restart {restart}) and max_restarts={c.max_restarts} "
                    "is used up", node=node)


def _ended(code: int | None) -> str:
    """How a node's launcher ended, as a person reads it."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"its launcher was killed by {signal.Signals(-code).name}"
    return f"its launcher exited with code {code}"
