"""Following one Job or JobSet of the Kubernetes engine to its end: its watches and what their
events mean, in Shoal's events (``gang_queued``, ``gang_started``, ``gang_restart``...) and,
at the end, an `AttemptOutcome`.

A fixed gang's JobSet is followed through its own restarts. A start of an elastic gang (one
JobSet of its own, see `manifests.Start`) ends early when one of its nodes is lost — a pod
disrupted, deleted while the gang ran, or ended without a report — and says which in
``Follow.lost``, so `elastic.ElasticStarts` can start the next one on the nodes left; when
Kueue preempts it while it runs above MIN nodes (``Follow.lent``: the next start lends a node);
or when the engine ends it to grow the gang (`Follow.end_to_grow`: ``Follow.grown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.kubernetes.client import KubeNotFound, Watch, WatchEvent
from shoal._engines.kubernetes.logs import log_tail, pod_selector
from shoal._engines.kubernetes.manifests import Start
from shoal._engines.kubernetes.status import (
    COMPLETION_INDEX,
    GangState,
    PodHistory,
    condition,
    deleted_before,
    first_failing_rank,
    gang_state,
    is_true,
    lost_nodes,
    lost_reason,
    node_index,
    owned_workload,
    pod_key,
    restart_attempt_of,
    terminal_record,
)
from shoal._runtime.observe import first_failure, read_reports
from shoal._spec.call import CallSpec
from shoal._storage.logs import gang_log_root
from shoal._storage.store import Store, join
from shoal.errors import EngineError, FailureInfo, ObjectNotFound

if TYPE_CHECKING:
    from shoal._engines.kubernetes.engine import KubernetesEngine

Obj = dict[str, Any]
JOB_NAME = "batch.kubernetes.io/job-name"  # the label the Job controller puts on its pods
LOG_TAIL_LINES = 30


class Follow:
    """The watches of one Job or JobSet and what their events mean; ``start``: the JobSet is
    one start of an elastic gang (its restart number is the start's, JobSet never restarts
    it, and a lost node ends it early)."""

    def __init__(self, engine: KubernetesEngine, call: CallSpec, ref: AttemptRef,
                 store: Store, io: str, obj: Obj, start: Start | None = None) -> None:
        self.engine, self.call, self.ref, self.store, self.io = engine, call, ref, store, io
        self.client = engine._client()
        self.kind, self.name = str(obj["kind"]), str(obj["metadata"]["name"])
        c = call.task.env.cluster
        self.nproc = c.nproc_per_node if c is not None else 1
        self.max_restarts = c.max_restarts if c is not None else 0
        self.selector = (pod_selector(self.name) if self.kind == "JobSet"
                         else f"{JOB_NAME}={self.name}")
        self.queue: asyncio.Queue[tuple[str, WatchEvent | BaseException]] = asyncio.Queue()
        self.watches: list[Watch] = []
        self.pods = PodHistory()
        self.obj: Obj | None = None
        self.workloads: dict[str, Obj] = {}
        # what has been told for the current admission: "queued", "admitted", "started"...
        self.told: set[str] = set()
        self.seen_restarts = 0
        self.start = start
        self.offset = start.restart if start is not None else 0  # r<N> of JobSet's attempt 0
        self.nnodes = (start.size(c) if start is not None and c is not None
                       else c.replicas if c is not None else 1)
        self.bounds = (c.min_nodes, c.replicas) if c is not None else (1, 1)
        self.outcome: AttemptOutcome | None = None
        self.lost: dict[int, str] = {}  # node -> why: the start ended by a lost node
        self.final = False  # the start failed in a way no restart mends (timeout, deactivated)
        self.deleted: set[str] = set()  # pods deleted while the gang ran
        self.checked: set[str] = set()  # pods whose deletion or disruption was looked at
        self.grown = False  # the engine ended the start to start it again one node bigger
        self.lent = False  # Kueue preempted the start above MIN: the next is one node smaller

    # -- watches in threads ----------------------------------------------------------------
    def open(self) -> None:
        loop = asyncio.get_running_loop()
        sources: list[tuple[str, Watch]] = [
            ("obj", self.client.watch(self.kind, self.name)),
            ("pod", self.client.watch("Pod", label_selector=self.selector))]
        if self.kind == "JobSet":
            sources.append(("workload", self.client.watch("Workload")))
        for source, watch in sources:
            self.watches.append(watch)
            threading.Thread(target=self._pump, args=(loop, source, watch), daemon=True,
                             name=f"shoal-watch {self.name} {source}").start()

    def _pump(self, loop: asyncio.AbstractEventLoop, source: str, watch: Watch) -> None:
        put: Callable[[tuple[str, WatchEvent | BaseException]], None] = self.queue.put_nowait
        try:
            for event in watch:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody listens
                    loop.call_soon_threadsafe(put, (source, event))
        except EngineError as e:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(put, (source, e))

    def close(self) -> None:
        for w in self.watches:
            w.close()

    def notify(self, kind: str, **data: Any) -> None:
        self.engine.notify(kind, self.ref.action, {"task": self.call.task.name, **data})

    def end_to_grow(self) -> None:
        """Ask the loop to end this start so the engine starts the gang one node bigger (its
        grower saw capacity for one more node and a checkpoint commit since): told through
        the queue, so whatever the watches said before it is looked at first."""
        self.queue.put_nowait(("grow", EngineError("end to grow")))

    # -- the loop ----------------------------------------------------------------------------
    async def until_done(self) -> AttemptOutcome:
        while True:
            source, event = await self.queue.get()
            if source == "grow":
                outcome = await self._grow_outcome()
                if outcome is not None:
                    return outcome
                continue
            if isinstance(event, BaseException):
                raise event
            if source == "pod":
                self._apply_pod(event.type, event.object)
                if self.start is not None and await self._node_lost(event.type, event.object):
                    return await self._lost_outcome()
                continue
            if source == "workload":
                if event.type == "DELETED":
                    self.workloads.pop(event.name, None)
                else:
                    self.workloads[event.name] = event.object
            elif event.type == "DELETED":
                return self._outcome_of_deleted()
            else:
                self.obj = event.object
            if self.obj is None:
                continue
            outcome = (await self._jobset_step(self.obj) if self.kind == "JobSet"
                       else await self._job_step(self.obj))
            if outcome is not None:
                return outcome

    async def _grow_outcome(self) -> AttemptOutcome | None:
        """The start ends to grow, unless its JobSet ended first (its end is the outcome,
        which its own watch event brings)."""
        try:
            jobset = await asyncio.to_thread(self.client.get, self.kind, self.name)
        except KubeNotFound:
            return None
        if gang_state(jobset).terminal:
            return None
        self.grown = True
        return AttemptOutcome(failure=self._info(
            "system", f"start {self.offset} ended to grow the gang (JobSet {self.name})"))

    def _outcome_of_deleted(self) -> AttemptOutcome:
        return AttemptOutcome(failure=self._info(
            "crash", f"{self.kind} {self.name} was deleted before it finished (by hand, or "
                     "by its ttlSecondsAfterFinished before Shoal saw it end)"))

    # -- a lost node (elastic starts only) ------------------------------------------------------
    async def _node_lost(self, event_type: str, pod: Obj) -> bool:
        """Whether this pod event shows a node of the start lost. A deletion or disruption
        counts only while the JobSet runs: Kueue suspending it, or its end, deletes the pods
        too. Each pod is looked at once."""
        key = pod_key(pod)
        deleting = event_type == "DELETED" or bool(
            (pod.get("metadata") or {}).get("deletionTimestamp"))
        if restart_attempt_of(pod) != 0 or key in self.checked:
            return False
        if not deleting and lost_reason(pod) is None:
            return False
        self.checked.add(key)
        try:
            jobset = await asyncio.to_thread(self.client.get, self.kind, self.name)
        except KubeNotFound:
            return False
        if bool((jobset.get("spec") or {}).get("suspend")) or gang_state(jobset).terminal:
            return False
        if deleting:
            self.deleted.add(key)
        self.lost.update(lost_nodes([pod], 0, deleted=self.deleted))
        return bool(self.lost)

    async def _lost_outcome(self) -> AttemptOutcome:
        node, why = next(iter(self.lost.items()))
        restart = self.offset
        pod = self._pod_of(node, 0)
        return AttemptOutcome(failure=self._info(
            "crash", f"node {node} lost (restart {restart}): {why}", node=node,
            log_tail=await self._tail(pod)))

    async def _lost_at_end(self, jobset: Obj) -> dict[int, str]:
        """The nodes lost in an elastic start that failed: as `_node_lost` sees them, a pod
        whose deletion was asked before the JobSet failed (its watch event may trail the
        JobSet's), and a pod that ended without a report from its launcher or ranks."""
        reports = await asyncio.to_thread(read_reports, self.store,
                                          join(self.io, f"r{self.offset}"))
        told = {int(r["node"]) for r in reports if isinstance(r.get("node"), int)}
        pods = self.pods.pods(0)
        failed_at = (condition(jobset, "Failed") or {}).get("lastTransitionTime")
        deleted = self.deleted | deleted_before(pods, failed_at)
        return lost_nodes(pods, 0, deleted=deleted, reported=told)

    def _started(self, restart: int) -> None:
        """``gang_started`` with the local engine's fields; a start resumed after a Kueue
        preemption (the same JobSet, admitted again) says so."""
        cause = self.start.cause if self.start is not None else (
            "first_start" if restart == 0 else "restart")
        if "was_preempted" in self.told:
            cause = "preempted"
        self.notify("gang_started", restart=restart, logs={}, pids=[],
                    master_port=self.engine.config.master_port, jobset=self.name,
                    nproc_per_node=self.nproc, nnodes=self.nnodes,
                    world_size=self.nnodes * self.nproc, cause=cause,
                    min_nnodes=self.bounds[0], max_nnodes=self.bounds[1])

    async def _jobset_step(self, jobset: Obj) -> AttemptOutcome | None:
        workload = owned_workload(jobset, self.workloads.values())
        state = gang_state(jobset, workload, seen_restarts=self.seen_restarts)
        restart = self.offset + state.restarts
        if state.restarts > self.seen_restarts:
            await self._refresh_pods()
            failure = await self._failure(self.seen_restarts, state)
            counted = int((jobset.get("status") or {}).get("restartsCountTowardsMax",
                                                            state.restarts))
            self.notify("gang_restart", restart=self.offset + self.seen_restarts,
                        message=failure.message, rank=failure.rank,
                        left=max(0, self.max_restarts - counted))
            self.seen_restarts = state.restarts
            self.told = {"admitted"}  # the same admission: the new gang starts again
        # Suspended while still admitted is the first half of an eviction (the Workload's
        # Evicted condition may arrive on its own watch a moment later), not a queue.
        if (state.phase in ("queued", "requeued") and "queued" not in self.told
                and not is_true(workload, "Admitted")):
            self.told.add("queued")
            self.notify("gang_queued", restart=restart, reason=state.reason)
        if state.phase == "preempted" and "preempted" not in self.told:
            self.told = {"preempted", "was_preempted"}
            self.notify("gang_preempted", restart=restart, uses_restart=False,
                        reason=state.reason)
        if state.phase in ("preempted", "requeued") and self._lends(workload):
            self.lent = True
            return AttemptOutcome(failure=self._info(
                "system", f"start {self.offset} was preempted by Kueue; the gang lends a node "
                          f"and goes on one node smaller (JobSet {self.name})"))
        if state.phase in ("running", "restarting"):
            self.told.discard("preempted")
            self.told.discard("queued")
            if "admitted" not in self.told:
                self.told.add("admitted")
                self.notify("gang_admitted", restart=restart,
                            cluster_queue=state.cluster_queue)
            if "started" not in self.told:
                self._started(restart)
                self.told.add("started")
                self.told.discard("was_preempted")
        if not state.terminal:
            return None
        await self._refresh_pods()
        record = terminal_record(jobset, workload, self.pods.pods(), nproc_per_node=self.nproc)
        self.notify("gang_finished", restart=restart, phase=state.phase, record=record)
        if state.phase == "succeeded":
            return await self._output(restart)
        self.final = "DeadlineExceeded" in state.reason or "deactivated" in state.reason
        if self.start is not None and not self.final:
            self.lost.update(await self._lost_at_end(jobset))
            if self.lost:
                return await self._lost_outcome()
        return AttemptOutcome(failure=await self._failure(state.restarts, state))

    def _lends(self, workload: Obj | None) -> bool:
        """Whether a start of an elastic gang above MIN nodes was preempted by Kueue (its
        Workload evicted for a higher-priority one): rather than wait to be admitted whole
        again, it gives one node back (`elastic.ElasticStarts`). Other evictions, and a
        start at MIN, wait to be readmitted at the same size."""
        evicted = condition(workload, "Evicted") or {}
        return (self.start is not None and self.nnodes > self.bounds[0]
                and evicted.get("status") == "True" and evicted.get("reason") == "Preempted")

    async def _job_step(self, job: Obj) -> AttemptOutcome | None:
        if is_true(job, "Complete"):
            return await self._output(0)
        if is_true(job, "Failed"):
            await self._refresh_pods()
            c = next(c for c in job["status"]["conditions"] if c.get("type") == "Failed")
            why = f"{c.get('reason', 'Failed')}: {c.get('message') or 'the Job failed'}"
            return AttemptOutcome(failure=await self._failure(0, GangState("failed", why)))
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if suspended and "queued" not in self.told:
            self.told.add("queued")
            self.notify("job_queued", reason="suspended until Kueue admits it")
        return None

    async def _refresh_pods(self) -> None:
        """The pods as they are now: a watch event may trail the end of their owner."""
        pods = await asyncio.to_thread(self.client.list, "Pod", self.selector)
        for pod in pods:
            self._apply_pod("MODIFIED", pod)

    def _apply_pod(self, event_type: str, pod: Obj) -> None:
        if self.kind == "Job":
            # A plain Job's one pod has no completion index; it is node 0 of its "gang".
            labels = pod.setdefault("metadata", {}).setdefault("labels", {})
            labels.setdefault(COMPLETION_INDEX, "0")
        self.pods.apply(event_type, pod)

    # -- results -----------------------------------------------------------------------------
    async def _output(self, restart: int) -> AttemptOutcome:
        uri = join(self.io, f"r{restart}", "output.json")
        try:
            data = await asyncio.to_thread(self.store.get_bytes, uri)
        except ObjectNotFound:
            return AttemptOutcome(failure=self._info(
                "system", f"{self.kind} {self.name} completed but rank 0 wrote no output at "
                          f"{uri}"))
        return AttemptOutcome(output=json.loads(data))

    def _info(self, kind: str, message: str, **more: Any) -> FailureInfo:
        return FailureInfo(task=self.call.task.name, action=self.ref.action,
                           attempt=self.ref.attempt, kind=kind, message=message, **more)

    async def _failure(self, attempt: int, state: GangState) -> FailureInfo:
        """Who failed first in JobSet restart ``attempt``: the ranks' and launchers' reports
        in the store (exact rank, traceback), else the first pod that failed on its own (exit
        code, signal), with the tail of that node's log either way."""
        timed_out = "DeadlineExceeded" in state.reason
        restart = self.offset + attempt  # the r<N> folder (an elastic start's own number)
        first = await asyncio.to_thread(first_failure, self.store,
                                        join(self.io, f"r{restart}"))
        if first is not None:
            rank, node = first.rank, first.node
            pod = self._pod_of(node, attempt)
            f = self._pod_failure(attempt)
            exit_code, sig = first.exit_code, first.signal
            if f is not None and f.node == node and exit_code is None and sig is None:
                exit_code, sig = f.exit_code, f.signal
            return self._info(
                "timeout" if timed_out else "user" if first.raised else "crash",
                f"rank {rank} failed first (restart {restart}): {first.message}",
                exit_code=exit_code, signal=sig, rank=rank, node=node,
                log_tail=await self._tail(pod), traceback=first.traceback,
                error_type=first.error_type)
        f = self._pod_failure(attempt)
        if f is not None:
            what = f.reason or "Error"
            how = f"killed by {f.signal}" if f.signal else f"exit code {f.exit_code}"
            return self._info(
                "timeout" if timed_out else "oom" if f.reason == "OOMKilled" else "crash",
                f"node {f.node} (pod {f.pod}) failed first (restart {restart}): {what}, {how}"
                + (f"; {f.message}" if f.message else ""),
                exit_code=None if f.signal else f.exit_code, signal=f.signal or None,
                rank=f.rank, node=f.node, log_tail=await self._tail(f.pod))
        return self._info("timeout" if timed_out else "crash",
                          f"{self.kind} {self.name} failed (restart {restart}): {state.reason}")

    def _pod_failure(self, restart: int) -> Any:
        return first_failing_rank(self.pods.pods(), restart, nproc_per_node=self.nproc)

    def _pod_of(self, node: int | None, restart: int) -> str | None:
        for pod in self.pods.pods(restart):
            if node is None or (node_index(pod) or 0) == node:
                return str(pod["metadata"]["name"])
        return None

    def keep_logs(self) -> None:
        """The attempt's pod logs as files where the local engine writes its own (a plain
        call's ``log_path``; a gang's ``gang/<action>.<attempt>/r<restart>/node<i>.log``), so
        they outlive the pods and the driver publishes them with its records."""
        for pod in self.pods.pods():
            name = str(pod["metadata"]["name"])
            if self.kind == "Job":
                path = self.ref.log_path
            else:
                node, restart = node_index(pod), self.offset + restart_attempt_of(pod)
                if node is None:
                    continue
                path = (gang_log_root(self.engine.home, self.ref.run)
                        / f"{self.ref.action}.{self.ref.attempt}" / f"r{restart}"
                        / f"node{node}.log")
            with contextlib.suppress(EngineError):  # a pod gone with its log: nothing to keep
                with self.client.pod_logs(name) as stream:
                    lines = [f"{line}\n" for line in stream]
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as f:  # a Job that retried its pod: every pod's lines
                    f.writelines(lines)

    async def _tail(self, pod: str | None) -> str:
        if pod is None:
            return ""
        return await asyncio.to_thread(log_tail, self.client, pod, LOG_TAIL_LINES)



__all__ = ["JOB_NAME", "Follow"]
