"""Clustered calls on the local engine: ``replicas`` simulated nodes, started and ended as one.

State machine of one task attempt (see docs/architecture.md):

    queued ──admitted──► running ──all nodes exit 0──► succeeded
      ▲                    │  ▲
      │                    │  └── restart, nothing else waits: same launchers, same reservation
      │                    ├─ a rank fails or hangs ──► stopping ──► restart left? ──no──► failed
      ├── restart, but a launcher died or other calls wait ◄───────────────┘yes
      └── readmitted ◄─────┴─ preempted (SIGTERM, grace) ──► requeued
                               (uses a restart unless resume_after_preemption)

Each node is one launcher process (`shoal._runtime.node.launcher`, the same program a Kubernetes
pod runs) in its own session and, where ``unshare`` allows, its own PID namespace, so ending a
node ends every process it started. Nodes talk over loopback; each start gets a fresh master
port and rendezvous id. The launchers outlive a restart after a rank failed or the gang hung:
told through their control sockets (`node_link`), they stop their ranks and fork the next
start's from their zygotes, so a restart costs no interpreter start or torch import. A
preempted gang, a dead launcher, or another call waiting for the machine ends the launchers
and queues the gang again, as a fresh start. Before a gang whose collective timed out, or that
made no progress for ``progress_timeout``, is stopped, its ranks are diagnosed (`hang.py`):
the failure then names the rank that stopped answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.local import procs
from shoal._engines.local.containers import LAUNCHER_COMMAND, Container
from shoal._engines.local.gangs import hang
from shoal._engines.local.gangs.failures import start_failure
from shoal._engines.local.gangs.node_link import NodeLink
from shoal._engines.local.gangs.node_net import NodeNet, node_nets
from shoal._engines.local.gangs.ray_gang import RayGang, ray_shape
from shoal._engines.local.plan import worker_environ
from shoal._runtime.log_files import log_tail
from shoal._runtime.node import read_status, timed_out
from shoal._runtime.observe import first_failure
from shoal._runtime.ports import free_port
from shoal._spec.call import CallSpec, ClusterSpec
from shoal._storage.call_io import put_call_io
from shoal._storage.private import private_dir
from shoal._storage.store import join, open_store
from shoal.errors import FailureInfo

if TYPE_CHECKING:
    from shoal._engines.local.engine import LocalEngine
    from shoal._engines.local.pool import Reservation

LAUNCHER = (sys.executable, "-m", "shoal._runtime.node.launcher")
# Seconds to let the other nodes' ranks write their own reports before they are killed.
FAILURE_GRACE = 2.0
# Seconds past a stop's grace period for a launcher to say its ranks ended, before it is ended.
STOP_ANSWER = 15.0


def pid_namespace_prefix() -> tuple[str, ...]:
    """``unshare`` in a new PID namespace, when this machine lets us: the kernel then ends every
    process of a node when its launcher dies, whatever they did to escape."""
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return ()
    import subprocess

    # Its own PID namespace (ending the launcher ends the node) with its own /proc, so process
    # tools inside see the node's processes and no others: as root directly, else through a
    # user namespace.
    ns = ("--pid", "--fork", "--kill-child", "--mount-proc")
    for prefix in ((exe, *ns), (exe, "--user", "--map-root-user", *ns)):
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
    return ()


@dataclass
class Gang:
    """One start of the nodes of a clustered call."""

    restart: int
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    links: list[NodeLink] = field(default_factory=list)
    ended: list[asyncio.Future[int]] = field(default_factory=list)  # per node: its exit code
    log_dir: Path = Path()
    io: str = ""
    cause: str = "first_start"  # why this start happened: a key of `START_CAUSES`
    world: int = 0  # its ranks (an elastic gang's starts differ)
    told: set[int] = field(default_factory=set)  # nodes told to stop their ranks


class GangRunner(RayGang):
    """Runs one attempt of a clustered call, with whole-group restarts and preemption."""

    def __init__(self, engine: LocalEngine, call: CallSpec, ref: AttemptRef) -> None:
        self.engine = engine
        self.call = call
        self.ref = ref
        assert call.task.env.cluster is not None  # dispatched here only for clustered calls
        self.cluster: ClusterSpec = call.task.env.cluster
        self.store = open_store(engine.store)
        self.io = join(engine.store, "runs", ref.run, ref.action, str(ref.attempt))
        self.preempted = asyncio.Event()
        self.gang: Gang | None = None
        self.diagnosis: hang.Diagnosis | None = None  # of the last start, if it hung
        self.nets: list[NodeNet] = []  # where the nodes of the last start sit on the network
        self.links: list[NodeLink] = []  # the launchers kept for the next start
        self.slots: list[int] = []  # where each of ``links`` sits: its index in ``nets``
        # A Ray gang kept after its call (`kept_clusters`): (whose calls reuse it, seconds).
        self.keep = self._keep_for()
        self.reusing = False  # this call runs its driver on a kept cluster's raylets
        self.port = 0  # the master port of the last start (a kept cluster's GCS port)
        # A Ray driver's id as a caller of other tasks (`LocalEngine.caller_settings`).
        self.caller_id = f"{ref.action}.{ref.attempt}-ray-driver"
        self.boxes: dict[int, Container] = {}  # `--containers`: each slot's latest container

    # -- the loop of starts ----------------------------------------------------------------
    async def run(self) -> AttemptOutcome:
        put_call_io(self.store, self.io, self.call.inputs, self.call.custom_context)
        request, priority = self.engine.gang_admission(self.call)
        restarts_used = 0
        restart = 0
        reservation: Reservation | None = None
        timeout, deadline = self.call.task.timeout, None
        cause = "first_start"
        try:
            while True:
                if reservation is None:
                    self.preempted.clear()
                    if restart == 0:  # max_queued_time bounds the attempt's wait only
                        reservation = await self.engine.admit_within(
                            self.call, request, priority=priority,
                            label=f"{self.ref.action} gang", on_preempt=self.preempted.set)
                        if reservation is None:
                            return self.engine.queued_too_long(self.call, self.ref)
                    else:
                        reservation = await self.engine.pool.acquire(
                            request, priority=priority, label=f"{self.ref.action} gang",
                            on_preempt=self.preempted.set)
                    self.engine.notify("gang_admitted", self.ref.action,
                                       {"task": self.call.task.name, "restart": restart})
                    if self.cluster.ray is not None:
                        self.engine.calls_from(self.ref.action, reservation)
                    if self.keep is not None and self.keep[0] and restart == 0:
                        # Once admitted: a call that ran meanwhile may have kept one.
                        self._reuse(self.engine.ray_clusters.take(self.keep[0]))
                if deadline is None and timeout is not None:
                    deadline = time.monotonic() + timeout  # from the first start, as a
                    # plain call's timeout starts once it is admitted
                try:
                    outcome = await asyncio.wait_for(
                        self._start_and_watch(restart, reservation.gpus, cause),
                        None if deadline is None else max(deadline - time.monotonic(), 0.0))
                except asyncio.TimeoutError:
                    return AttemptOutcome(failure=self._timed_out(restart))
                if self.call.task.env.profile is not None:
                    await self._summarize_profiles(restart)
                if outcome == "succeeded":
                    if self.keep is not None:
                        self._keep_cluster()
                    await self._drop_links()
                    return AttemptOutcome(output=self._output(restart))
                self.keep = None  # a cluster that failed is never kept
                self.reusing = False
                if not self._keeps_nodes(outcome):
                    await self._drop_links()
                    reservation.release()
                    reservation = None
                if outcome == "preempted" and self.cluster.resume_after_preemption:
                    self.engine.notify("gang_preempted", self.ref.action,
                                       {"task": self.call.task.name, "restart": restart,
                                        "uses_restart": False})
                    restart, cause = restart + 1, "preempted"
                    continue
                failure = await self._as_oom(start_failure(self, restart,
                                                           preempted=outcome == "preempted"))
                if restarts_used < self.cluster.max_restarts:
                    restarts_used += 1
                    self.engine.notify("gang_restart", self.ref.action, {
                        "task": self.call.task.name, "restart": restart,
                        "message": failure.message, "rank": failure.rank,
                        "left": self.cluster.max_restarts - restarts_used})
                    restart += 1
                    cause = "preempted" if outcome == "preempted" else "restart"
                    continue
                return AttemptOutcome(failure=failure)
        finally:
            await self._drop_links()
            if reservation is not None:
                reservation.release()
            if self.cluster.ray is not None:
                self.engine.forget_caller(self.caller_id)
                self.engine.calls_from(self.ref.action, None)

    def _keeps_nodes(self, outcome: str) -> bool:
        """Whether the next start may reuse this one's launchers and reservation: its ranks
        failed or hung (not preempted), every launcher is alive, and nothing else waits for
        the machine (then the gang is admitted again, in its turn)."""
        return (outcome in ("failed", "hung") and bool(self.links)
                and all(link.alive for link in self.links) and not self.preempted.is_set()
                and not self.engine.pool.others_waiting())

    def _timed_out(self, restart: int) -> FailureInfo:
        tails = [log_tail(p, 15) for p in sorted(self.start_dir(restart).glob("rank*.log"))]
        return FailureInfo(
            task=self.call.task.name, action=self.ref.action, attempt=self.ref.attempt,
            kind="timeout", message=f"ran past its timeout of {self.call.task.timeout:g}s "
            f"(restart {restart}); every node's processes were ended",
            log_tail="\n".join(t for t in tails if t))

    async def _drop_links(self) -> None:
        """End the launchers kept between starts, if any (they exit on EOF)."""
        links, self.links, self.slots = self.links, [], []
        await asyncio.gather(*(link.close() for link in links))

    async def _start_and_watch(self, restart: int, gpus: tuple[int, ...],
                               cause: str = "first_start") -> str:
        gang = await self._start(restart, gpus, cause)
        self.gang = gang
        self.diagnosis = None
        waits = {future: i for i, future in enumerate(gang.ended)}
        preempt = asyncio.ensure_future(self.preempted.wait())
        stalled = asyncio.ensure_future(self._stalled(gang))
        failing = asyncio.ensure_future(self._failing(gang))
        try:
            pending: set[asyncio.Future[Any]] = set(waits)
            watched: set[asyncio.Future[Any]] = {preempt, stalled, failing}
            while pending:
                done, pending = await asyncio.wait(pending | watched,
                                                   return_when=asyncio.FIRST_COMPLETED)
                pending -= watched
                if failing in done:
                    # A node is stopping its ranks after one failed (and did not time out):
                    # the others stop theirs now, in parallel, instead of once it has ended.
                    watched.discard(failing)
                    self._tell_stop(gang, FAILURE_GRACE, spare=failing.result())
                if preempt in done:
                    await self._stop(gang, self.cluster.grace_period)
                    return "preempted"
                if stalled in done:
                    await self._diagnose(gang, "no_progress")
                    await self._stop(gang, FAILURE_GRACE, keep=True)
                    return "hung"
                head_done = gang.ended[0] in done and gang.ended[0].result() == 0
                if self.cluster.ray is not None and head_done:
                    # The driver on the head is done, and with it the cluster (unless it is
                    # kept): the workers' raylets never end on their own.
                    if self.keep is None:
                        await self._stop(gang, FAILURE_GRACE, keep=True)
                    return "succeeded"
                if any(t.result() != 0 for t in done if t in waits):
                    await self._diagnose_if_timed_out(gang)
                    await self._stop(gang, FAILURE_GRACE, keep=True)
                    return "failed"
            return "succeeded"
        except asyncio.CancelledError:
            await self._stop(gang, self.cluster.grace_period)
            raise
        finally:
            preempt.cancel()
            stalled.cancel()
            failing.cancel()
            for future in gang.ended:
                future.cancel()
            self.gang = None
            if self.cluster.ray is not None:
                self._remove_ray_dirs(gang)

    async def _failing(self, gang: Gang) -> int:
        """The node whose launcher first says a rank of this start failed."""
        said = {asyncio.ensure_future(link.failing.wait()): i for i, link in enumerate(gang.links)}
        try:
            done, _ = await asyncio.wait(said, return_when=asyncio.FIRST_COMPLETED)
            return said[next(iter(done))]
        finally:
            for future in said:
                future.cancel()

    def _tell_stop(self, gang: Gang, grace: float, spare: int | None = None) -> None:
        """Ask every node still running ranks (but ``spare``) to stop them, once each."""
        for i, (link, ended) in enumerate(zip(gang.links, gang.ended, strict=True)):
            if i != spare and i not in gang.told and not ended.done():
                gang.told.add(i)
                link.send({"stop": grace})

    async def _stalled(self, gang: Gang) -> None:
        """Returns when the gang stopped making progress; never without a progress_timeout."""
        c = self.cluster
        if c.progress_timeout is None:
            await asyncio.Event().wait()  # cancelled with the start
        else:
            await hang.watch(gang.log_dir, gang.world, c.progress_timeout)

    async def _diagnose_if_timed_out(self, gang: Gang) -> None:
        first = first_failure(self.store, join(self.io, f"r{gang.restart}"))
        if first is None or first.rank is None:
            return
        report = next((r for r in first.reports
                       if r.get("rank") == first.rank and r["kind"] == "rank"), {})
        status = read_status(gang.log_dir, first.rank)
        code = -signal.SIGABRT if first.signal == "SIGABRT" else first.exit_code
        if timed_out(report, status, code, self.cluster.collective_timeout, time.time()):
            await self._diagnose(gang, "collective_timeout")

    async def _diagnose(self, gang: Gang, reason: str) -> None:
        self.diagnosis = await hang.diagnose(
            gang.procs, self.store, join(self.io, f"r{gang.restart}"), gang.log_dir,
            gang.world, reason)
        self.engine.notify("gang_hang", self.ref.action, {
            "task": self.call.task.name, "restart": gang.restart,
            **self.diagnosis.event()})

    def start_dir(self, restart: int) -> Path:
        """The folder of one start's rank and node logs."""
        ref = self.ref
        return ref.log_path.parent / "gang" / f"{ref.action}.{ref.attempt}" / f"r{restart}"

    async def _start(self, restart: int, gpus: tuple[int, ...] = (),
                     cause: str = "first_start") -> Gang:
        """Start every node; node ``i`` sees its share of the gang's GPUs ``gpus``."""
        c, ref = self.cluster, self.ref
        log_dir = self.start_dir(restart)
        private_dir(log_dir)
        gang = Gang(restart=restart, log_dir=log_dir, io=self.io, cause=cause)
        port = self.port if self.reusing else free_port()  # a kept cluster's GCS stays
        self.port = port
        in_place = bool(self.links)
        if in_place:
            self._restart_in_place(gang, port)
        else:
            await self._launch(gang, port, gpus)  # then told to start, as a restart is
        gang.procs = [link.proc for link in gang.links]
        for link in gang.links:
            link.failing.clear()  # said of the last start, whose end has been read
        gang.ended = [asyncio.ensure_future(link.ended()) for link in gang.links]
        nnodes = len(gang.links)
        # A Ray gang has one rank, its driver on the head, whatever its nodes.
        world = gang.world = 1 if c.ray is not None else nnodes * c.nproc_per_node
        logs: dict[str, str] = {}
        for rank in range(world):
            logs[f"{self.call.task.name} {ref.action} rank {rank}"] = str(
                log_dir / f"rank{rank}.log")
        self.engine.notify("gang_started", ref.action, {
            "task": self.call.task.name, "restart": restart, "logs": logs,
            "pids": [p.pid for p in gang.procs], "master_port": port,
            # `shoal logs` and the UI place each rank on its node from these.
            "nnodes": nnodes, "nproc_per_node": c.nproc_per_node, "world_size": world,
            "cause": cause, "min_nnodes": c.min_nodes, "max_nnodes": c.replicas,
            "same_launchers": in_place, **({"ray": ray_shape(c)} if c.ray else {})})
        return gang

    def _restart_in_place(self, gang: Gang, port: int) -> None:
        """The start in the launchers of ``self.links`` (the last start's, or new ones): each
        forks its ranks. Node ranks follow the order of ``self.links`` and the master is
        node 0's address, so an elastic gang that lost its first node starts on the rest."""
        c = self.cluster
        master = self.nets[self.slots[0]].address
        beat = self.heartbeat()
        for node_rank, link in enumerate(self.links):
            if self.reusing and node_rank > 0:
                continue  # the workers' raylets run on; only the head starts a driver
            start: dict[str, Any] = {
                "restart_attempt": gang.restart, "master_port": port,
                "rank_log_dir": str(gang.log_dir),
                "node_log": str(gang.log_dir / f"node{node_rank}.log"),
                "node_rank": node_rank, "nnodes": len(self.links), "master_addr": master,
                "start_cause": gang.cause}
            if c.elastic:
                start |= {"min_nnodes": c.min_nodes, "max_nnodes": c.replicas}
            if self.keep is not None:
                start |= {"keep_cluster": True, "driver_only": self.reusing}
            if self.reusing:  # the head's launcher was started for another call
                start |= {"action": self.ref.action, "attempt": self.ref.attempt,
                          "io": self.io, "checkpoint_uri": contract.checkpoint_uri(
                              self.engine.store, self.engine.lineage, self.ref.action)}
            if c.ray is not None and node_rank == 0:
                # The driver may call other tasks, as a plain task does.
                start |= self.engine.caller_settings(self.caller_id, link.proc,
                                                     self.ref.log_path)
            if beat:
                start["heartbeat"] = beat
            link.send({"start": start})
        gang.links = list(self.links)

    def heartbeat(self) -> float:
        """Seconds between a launcher's "alive" lines; 0: it sends none (a fixed gang: its
        nodes' loss is their process ending)."""
        return 0.0

    async def _launch(self, gang: Gang, port: int, gpus: tuple[int, ...]) -> None:
        """A launcher process per node, each with its control socket."""
        c = self.cluster
        self.links = gang.links  # filled as they start: ended with the attempt if one fails
        self.slots = []
        self.nets = node_nets(c.replicas, past_localhost=c.ray is not None)
        if c.ray is not None:  # what killed runs' clusters left in /tmp
            from shoal._runtime.node import sweep_dead_clusters

            await asyncio.to_thread(sweep_dead_clusters)
        share = len(gpus) // c.replicas
        for node_rank in range(c.replicas):
            self.slots.append(node_rank)
            gang.links.append(await self._spawn(
                node_rank, node_rank, c.replicas, gang.restart, port, gang.log_dir,
                gpus[node_rank * share:(node_rank + 1) * share],
                gang.log_dir / f"node{node_rank}.log"))
        # Every node imports in its zygote first; told to start together, the gang's ranks do.
        try:
            await asyncio.gather(*(link.ready() for link in gang.links))
        except asyncio.CancelledError:
            # Cancelled (a deadline, Ctrl-C) while the zygotes import: no rank runs yet, and a
            # launcher reads its socket only once its zygote is done, so end them now.
            await asyncio.gather(*(link.kill() for link in gang.links))
            raise
        self._restart_in_place(gang, port)

    async def _spawn(self, slot: int, node_rank: int, nnodes: int, restart: int, port: int,
                     log_dir: Path, gpus: tuple[int, ...], log: Path) -> NodeLink:
        """One node's launcher at ``self.nets[slot]``, seeing ``gpus``, writing to ``log``
        until its first start names its own; its ranks wait for a start."""
        c, ref, env = self.cluster, self.ref, self.call.task.env
        nets = self.nets
        node = NodeEnv(
            home=str(self.engine.home), store=self.engine.store, run=ref.run,
            action=ref.action, attempt=ref.attempt, env_name=env.name,
            code_file=self.call.task.code_file, task=self.call.task.name, io=self.io,
            node_rank=node_rank, nnodes=nnodes, nproc_per_node=c.nproc_per_node,
            master_addr=nets[self.slots[0] if self.slots else slot].address,
            master_port=port, restart_attempt=restart,
            runtime=c.runtime, rdzv_backend=c.rdzv_backend,
            torch_max_restarts=c.torch_max_restarts, launch=self.engine.launch_mode(c),
            rank_log_dir=str(log_dir), collective_timeout=c.collective_timeout,
            grace_period=c.grace_period, master_wait=30.0,
            # Each simulated node has its own address, as real nodes have their own IPs:
            # torchrun's c10d rendezvous tells agents apart by address and pid, and pids
            # repeat across PID namespaces.
            node_addr=nets[slot].address,
            checkpoint_uri=contract.checkpoint_uri(self.engine.store, self.engine.lineage,
                                                   ref.action),
            profile=env.profile.to_text() if env.profile is not None else "",
        )
        environ = worker_environ(env, None, self.engine.base_environ(),
                                 gpus_emulated=self.engine.gpus_emulated(env))
        environ.update(self.engine.secret_env(env))
        environ.update(self.engine.gpu_environ(env, gpus))
        environ.update(node.to_env())
        environ[contract.POD_IP] = nets[slot].address
        if c.ray is not None:
            from shoal._spec.ray import nodes_config

            environ[contract.RAY_NODES] = nodes_config(c.ray, env.resources)
        box = await self._in_image(slot, environ, gpus) \
            if self.engine.containers is not None else None
        ours, theirs = socket.socketpair()
        fds: tuple[int, ...] = (theirs.fileno(),)
        environ.setdefault(contract.CONTROL_FD, str(theirs.fileno()))
        if self.engine.lifeline is not None:
            fds += (self.engine.lifeline[0],)
            environ.setdefault(contract.LIFELINE_FD, str(self.engine.lifeline[0]))
        command = (*nets[slot].prefix, *self.engine.namespace_prefix(), *LAUNCHER)
        if box is not None:  # the client runs here; the launcher's variables are in its file
            command, environ = box.argv(fds), self.engine.client_environ()
        try:
            proc = await procs.spawn(command, environ, log, pass_fds=fds,
                                     cwd=None if box is None else str(box.folder))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if box is not None:
            box.attach(proc)
        link = await NodeLink.open(proc, ours, box)
        if c.ray is not None and node_rank == 0:
            link.on_message = self._ray_cluster
        return link

    async def _in_image(self, slot: int, environ: dict[str, str],
                        gpus: tuple[int, ...]) -> Container:
        """The container node ``slot``'s launcher runs in (``--containers``), its variables
        ``environ`` written: its control socket and lifeline are passed in as 3 and 4."""
        containers = self.engine.containers
        assert containers is not None
        environ[contract.CONTROL_FD] = "3"
        if self.engine.lifeline is not None:
            environ[contract.LIFELINE_FD] = "4"
        env, ref = self.call.task.env, self.ref
        plan = containers.plan(
            env, name=containers.unique_name(ref.action, str(ref.attempt), f"n{slot}"),
            command=LAUNCHER_COMMAND, code_file=self.call.task.code_file, gpus=gpus,
            controller=self.engine.controller_path(),
            preserve_fds=2 if self.engine.lifeline is not None else 1)
        box = self.boxes[slot] = await containers.open(env, plan, environ)
        return box

    async def _as_oom(self, failure: FailureInfo) -> FailureInfo:
        """``failure`` as an OOM kill when its rank was SIGKILLed by the kernel at its node's
        container memory limit (``--containers``; a fixed gang, whose node is its slot), as a
        plain call's is."""
        box = self.boxes.get(failure.node) if failure.node is not None else None
        if box is None or self.cluster.elastic or failure.signal != "SIGKILL" \
                or not await box.oom_killed():
            return failure
        limit = box.plan.limits.memory or 0
        return dataclasses.replace(failure, kind="oom", message=(
            f"{failure.message}: the kernel killed it at its node's memory limit of "
            f"{limit / 2**20:.0f} MiB (raise Resources(memory=...) or use less)"))

    async def _stop(self, gang: Gang, grace: float, *, keep: bool = False) -> None:
        """Stop the ranks of every node still running some: ``keep``, through the control
        socket (the launchers stay for the next start; one that does not answer in time is
        ended with the others); otherwise SIGTERM every node (the launchers pass it on to
        their ranks), then SIGKILL."""
        if keep:
            self._tell_stop(gang, grace)
            try:
                await asyncio.wait_for(asyncio.gather(*gang.ended), grace + STOP_ANSWER)
                return
            except asyncio.TimeoutError:
                pass
        await asyncio.gather(*(link.kill(grace) for link in gang.links
                               if link.proc.returncode is None))
        for p in gang.procs:
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(p.wait(), 10)
        await self._drop_links()

    async def _summarize_profiles(self, restart: int) -> None:
        """The profiled windows' summaries, beside their traces (`shoal profile`, the UI)."""
        from shoal._storage.profile_files import summarize_restart

        ref = self.ref
        try:
            await asyncio.to_thread(summarize_restart, self.engine.home, ref.run, ref.action,
                                    ref.attempt, restart)
        except (OSError, ValueError) as e:  # a trace cut short: `shoal profile` says which
            print(f"shoal: the profiles of {ref.action} restart {restart} could not be "
                  f"summarized: {e}", file=sys.stderr)

    def preempt(self) -> None:
        self.preempted.set()

    # -- reading what the ranks left ---------------------------------------------------------
    def _output(self, restart: int) -> Any:
        return json.loads(self.store.get_bytes(join(self.io, f"r{restart}", "output.json")))
