"""Elastic gangs on the Kubernetes engine: each start is a JobSet of its own, at its size.

A JobSet cannot resize: its replica count is fixed, its failure policy restarts the whole group
at the same size, and Kueue admits it whole. Kubeflow's PyTorchJob ``elasticPolicy`` would need
the training operator and torchrun's etcd/c10d rendezvous inside the pods. So the engine drives
the gang itself, as the local engine does with its launchers:

    start r0: JobSet of MAX nodes (maxRestarts 0) ──succeeded──► output
        │
        ├─ a node lost (pod disrupted, deleted while it ran, ended without a report)
        │     → delete the JobSet, wait for its pods to be gone; gang_resized N → N-1;
        │       start r+1: a new JobSet of N-1 nodes (≥ MIN), cause node_lost; uses a restart
        ├─ Kueue preempted it above MIN nodes → delete the JobSet, wait for it and its pods
        │       to be gone; gang_resized N → N-1; start r+1: a new JobSet of N-1 nodes, cause
        │       node_lent, which Kueue may admit next to the higher-priority workload; uses no
        │       restart (the gang gives capacity back). At MIN the JobSet waits, suspended,
        │       to be admitted again at its size (gang_started cause preempted)
        ├─ a rank failed, every pod there → delete it; gang_restart; start r+1 at N, cause
        │       restart; uses a restart
        ├─ running below MAX: a capacity probe (`probe.compile_probe`) waits in the queue;
        │     Kueue admitted it and a checkpoint was committed since → delete the probe and
        │     the JobSet, wait for both to be gone; gang_resized N → N+1; start r+1: a new
        │     JobSet of N+1 nodes, cause grown; uses no restart
        └─ no restart left, fewer than MIN nodes left, or a timeout → the attempt fails

Each new JobSet is a new Kueue workload, admitted whole again. An admitted JobSet cannot grow,
and Kueue says nothing about free capacity until a workload asks for it; so a start below MAX
asks, with a probe: a suspended one-pod Job with one node's requests, in the gang's queue and
priority (`Grower`; one probe at a time, only while the start runs). Its admission is the sign
that one more node fits. The growth waits for the next checkpoint commit, as on the local
engine, so no step since the last commit is lost.

Two costs, by design. The admitted probe holds one node's quota (and, once scheduled, a node)
while it waits for that commit. And between the probe's deletion and the bigger JobSet's
admission another workload may take the quota: the bigger start then waits in the queue like
any workload, its training stopped (Kueue cannot hand one workload's reservation to another).
The probe goes on every way out of a start (`Grower.stop`); it also names the JobSet as its
owner, so the garbage collector removes it with the JobSet if no engine is left to.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import TYPE_CHECKING, Any

from shoal import _contract as contract
from shoal._engines.base import AttemptOutcome, AttemptRef, latest_commit
from shoal._engines.kubernetes.client import KubeNotFound
from shoal._engines.kubernetes.follow import JOB_NAME, Follow
from shoal._engines.kubernetes.manifests import Start
from shoal._engines.kubernetes.probe import compile_probe
from shoal._spec.call import CallSpec, ClusterSpec
from shoal._storage.store import Store
from shoal.errors import EngineError, FailureInfo

if TYPE_CHECKING:
    from shoal._engines.kubernetes.engine import KubernetesEngine

# Seconds between looks at a deleted JobSet until it and its pods are gone, and the most to
# wait beyond the pods' grace period.
GONE_POLL = 0.2
GONE_SLACK = 60.0
# Seconds between the grower's looks at its start, its probe and the checkpoint's commits.
GROW_POLL = 0.25


class ElasticStarts:
    """Runs one attempt of an elastic clustered call as a series of JobSets."""

    def __init__(self, engine: KubernetesEngine, call: CallSpec, ref: AttemptRef,
                 store: Store, io: str) -> None:
        self.engine, self.call, self.ref, self.store, self.io = engine, call, ref, store, io
        c = call.task.env.cluster
        assert c is not None and c.elastic
        self.cluster: ClusterSpec = c

    def notify(self, kind: str, **data: Any) -> None:
        self.engine.notify(kind, self.ref.action, {"task": self.call.task.name, **data})

    async def run(self) -> AttemptOutcome:
        c = self.cluster
        start, used = Start(restart=0, nnodes=c.replicas, cause="first_start"), 0
        while True:
            objects = await asyncio.to_thread(self.engine.compile, self.call, self.ref,
                                              True, start)
            follow = Follow(self.engine, self.call, self.ref, self.store, self.io, objects[0],
                            start)
            grower = Grower(self, follow) if start.size(c) < c.replicas else None
            try:
                await self.engine.follow(self.call, self.ref, self.store, self.io, objects,
                                         start, follow=follow)
            finally:
                if grower is not None:  # its probe goes on every way out, first when growing
                    await grower.stop(wait=follow.grown or follow.lent)
            outcome = follow.outcome
            assert outcome is not None
            if follow.grown:
                await self._delete(follow)
                size = start.size(c)
                self.notify("gang_resized", restart=start.restart + 1, **{"from": size},
                            to=size + 1, cause="grown", nodes=[size],
                            reason="a node's capacity is back (Kueue admitted the probe), "
                                   "joined at a checkpoint commit",
                            uses_restart=False, left=c.max_restarts - used, jobset=follow.name)
                start = Start(restart=start.restart + 1, nnodes=size + 1, cause="grown")
                continue
            if follow.lent:  # Kueue wants capacity back: give one node, not the whole gang
                await self._delete(follow)
                size = start.size(c)
                self.notify("gang_resized", restart=start.restart + 1, **{"from": size},
                            to=size - 1, cause="node_lent", nodes=[size - 1],
                            reason="Kueue preempted the gang for a higher-priority workload; "
                                   "it goes on with one node fewer",
                            uses_restart=False, left=c.max_restarts - used, jobset=follow.name)
                start = Start(restart=start.restart + 1, nnodes=size - 1, cause="node_lent")
                continue
            if outcome.ok or follow.final:
                return outcome
            assert outcome.failure is not None
            left_nodes = start.size(c) - len(follow.lost)
            if follow.lost and (left_nodes < c.min_nodes or used >= c.max_restarts):
                # the nodes left would train on for nothing: the attempt ends here
                await self._delete(follow, wait=False)
                if left_nodes < c.min_nodes:
                    return AttemptOutcome(failure=self._below_min(outcome.failure, follow,
                                                                  left_nodes))
            if used >= c.max_restarts:
                return outcome
            used += 1
            left = c.max_restarts - used
            await self._delete(follow)
            if follow.lost:
                lost = sorted(follow.lost)
                reason = "; ".join(f"node {n} lost ({follow.lost[n]})" for n in lost)
                self.notify("gang_resized", restart=start.restart + 1, **{"from": start.size(c)},
                            to=left_nodes, cause="node_lost", nodes=lost, reason=reason,
                            uses_restart=True, left=left, jobset=follow.name)
                start = Start(restart=start.restart + 1, nnodes=left_nodes, cause="node_lost")
            else:
                f = outcome.failure
                self.notify("gang_restart", restart=start.restart, message=f.message,
                            rank=f.rank, left=left, jobset=follow.name)
                start = Start(restart=start.restart + 1, nnodes=start.size(c),
                              cause="restart")

    def _below_min(self, failure: FailureInfo, follow: Follow, left: int) -> FailureInfo:
        c = self.cluster
        lost = "; ".join(f"node {n}: {why}" for n, why in follow.lost.items())
        return FailureInfo(
            task=failure.task, action=failure.action, attempt=failure.attempt, kind="crash",
            message=(f"the gang lost {len(follow.lost)} of {follow.nnodes} node(s) ({lost}): "
                     f"{left} left, fewer than its min_replicas={c.min_nodes}, so it cannot go "
                     f"on (JobSet {follow.name})"),
            node=failure.node, log_tail=failure.log_tail)

    async def _delete(self, follow: Follow, wait: bool = True) -> None:
        """Delete the start's JobSet and (``wait``) wait until it is gone: Foreground deletion
        removes its Jobs and pods first, so the next start never meets a rank of this one."""
        await delete_and_wait(self.engine, follow.kind, follow.name,
                              self.cluster.grace_period + 15 if wait else None)

    def latest_commit(self) -> int:
        """The step of the call's latest committed checkpoint; -1 without one."""
        return latest_commit(self.store, contract.checkpoint_uri(
            self.engine.config.store, self.engine.lineage, self.ref.action))


async def delete_and_wait(engine: KubernetesEngine, kind: str, name: str,
                          grace: float | None) -> None:
    """Delete ``name`` (Foreground) and, unless ``grace`` is None, wait until it is gone: at
    most ``grace`` (its pods' grace period) and `GONE_SLACK` seconds."""
    client = engine._client()
    await asyncio.to_thread(client.delete, kind, name, "Foreground", missing_ok=True)
    if grace is None:
        return
    deadline = time.monotonic() + grace + GONE_SLACK
    while True:
        try:
            await asyncio.to_thread(client.get, kind, name)
        except KubeNotFound:
            return
        if time.monotonic() > deadline:
            raise EngineError(f"{kind} {name} was deleted but is still there after "
                              f"{GONE_SLACK:.0f} s past its pods' grace period; the next "
                              f"start of the gang waits for it (is a finalizer stuck? "
                              f"kubectl get {kind.lower()} {name} -o yaml)")
        await asyncio.sleep(GONE_POLL)


class Grower:
    """Beside a start below MAX nodes: keeps one capacity probe (`probe.compile_probe`) in
    the gang's queue while the start runs, and ends the start (`Follow.end_to_grow`) at the
    first checkpoint commit after Kueue admitted the probe. `stop` deletes the probe, whatever
    ended the start (its end, its failure, a cancelled attempt, the growth itself)."""

    def __init__(self, starts: ElasticStarts, follow: Follow) -> None:
        self.starts, self.follow = starts, follow
        self.probe: str | None = None  # the probe's name once it is being created
        self.creating: asyncio.Future[Any] | None = None
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            await self._until_grown()
        except EngineError as e:  # a grower that cannot ask: the start trains on at its size
            print(f"shoal: {self.starts.ref.action}: the elastic gang cannot ask for a node "
                  f"more ({e}); it trains on with {self.follow.nnodes} node(s)",
                  file=sys.stderr)

    async def _until_grown(self) -> None:
        client = self.starts.engine._client()
        mark: int | None = None  # the latest commit when the probe was admitted
        while True:
            await asyncio.sleep(GROW_POLL)
            if "started" not in self.follow.told or self.follow.obj is None:
                # not running (queued again after a preemption): a probe would hold quota
                # the start itself waits for (gone before a new one of its name is made)
                await self.delete_probe(wait=True)
                mark = None
                continue
            if self.probe is None:
                uid = (self.follow.obj.get("metadata") or {}).get("uid")
                probe = compile_probe(self.follow.obj, owner_uid=uid)
                self.probe = str(probe["metadata"]["name"])
                # a thread goes on when its awaiter is cancelled: `stop` waits for it
                self.creating = asyncio.ensure_future(asyncio.to_thread(client.create, probe))
                await asyncio.shield(self.creating)
                continue
            if mark is None:
                if await asyncio.to_thread(self._admitted, self.probe):
                    mark = await asyncio.to_thread(self.starts.latest_commit)
                continue
            if await asyncio.to_thread(self.starts.latest_commit) > mark:
                self.follow.end_to_grow()
                return

    def _admitted(self, name: str) -> bool:
        """Kueue admitted the probe (unsuspended it) and its pod has a node: one more node of
        the gang fits now."""
        client = self.starts.engine._client()
        try:
            job = client.get("Job", name)
        except KubeNotFound:
            return False
        if bool((job.get("spec") or {}).get("suspend")):
            return False
        for pod in client.list("Pod", f"{JOB_NAME}={name}"):
            status = pod.get("status") or {}
            if status.get("phase") == "Running" or any(
                    c.get("type") == "PodScheduled" and c.get("status") == "True"
                    for c in status.get("conditions") or []):
                return True
        return False

    async def stop(self, wait: bool) -> None:
        """Stop growing and delete the probe; ``wait``: until it is gone (the next start is
        the bigger one, which needs its quota)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if self.creating is not None:
            with contextlib.suppress(EngineError):
                await self.creating
        with contextlib.suppress(EngineError):
            await self.delete_probe(wait)

    async def delete_probe(self, wait: bool) -> None:
        name, self.probe, self.creating = self.probe, None, None
        if name is not None:
            await delete_and_wait(self.starts.engine, "Job", name, 5.0 if wait else None)


__all__ = ["ElasticStarts"]
