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
        ├─ a rank failed, every pod there → delete it; gang_restart; start r+1 at N, cause
        │       restart; uses a restart
        └─ no restart left, fewer than MIN nodes left, or a timeout → the attempt fails

Each new JobSet is a new Kueue workload, admitted whole again. A gang never grows back here
within an attempt: an admitted JobSet cannot grow, so the next attempt (or a requeue of it)
starts at MAX again.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.kubernetes.client import KubeNotFound
from shoal._engines.kubernetes.manifests import Start
from shoal._spec.call import CallSpec, ClusterSpec
from shoal._storage.store import Store
from shoal.errors import EngineError, FailureInfo

if TYPE_CHECKING:
    from shoal._engines.kubernetes.engine import KubernetesEngine
    from shoal._engines.kubernetes.follow import Follow

# Seconds between looks at a deleted JobSet until it and its pods are gone, and the most to
# wait beyond the pods' grace period.
GONE_POLL = 0.2
GONE_SLACK = 60.0


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
            follow = await self.engine.follow(self.call, self.ref, self.store, self.io,
                                              objects, start)
            outcome = follow.outcome
            assert outcome is not None
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
        client = self.engine._client()
        await asyncio.to_thread(client.delete, follow.kind, follow.name, "Foreground",
                                missing_ok=True)
        if not wait:
            return
        deadline = time.monotonic() + self.cluster.grace_period + 15 + GONE_SLACK
        while True:
            try:
                await asyncio.to_thread(client.get, follow.kind, follow.name)
            except KubeNotFound:
                return
            if time.monotonic() > deadline:
                raise EngineError(f"JobSet {follow.name} was deleted but is still there after "
                                  f"{GONE_SLACK:.0f} s past its pods' grace period; the next "
                                  f"start of the gang waits for it (is a finalizer stuck? "
                                  f"kubectl get jobset {follow.name} -o yaml)")
            await asyncio.sleep(GONE_POLL)


__all__ = ["ElasticStarts"]
