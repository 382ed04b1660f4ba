"""The Ray parts of a gang on the local engine (`GangRunner` mixes them in).

A Ray gang's node 0 is the head and runs the driver; the workers' raylets never end on their
own, so the gang ends when the driver does, unless the cluster is kept (`kept_clusters`): for
the environment's next call (``ReusePolicy``) or for its clients (``ttl_seconds_after_finished``).
Here: when a cluster is kept and how it is handed over, the head's ``ray_cluster`` event, and
the failure of a node that lost its raylet.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal._engines.local.gangs.kept_clusters import KeptCluster
from shoal._engines.local.gangs.node_link import NodeLink
from shoal._engines.local.gangs.node_net import NodeNet
from shoal._runtime.log_files import log_tail
from shoal._runtime.observe import FirstFailure
from shoal._spec.call import CallSpec, ClusterSpec
from shoal.errors import FailureInfo

if TYPE_CHECKING:
    from shoal._engines.base import AttemptRef
    from shoal._engines.local.engine import LocalEngine

__all__ = ["RayGang", "ray_shape"]


def ray_shape(c: ClusterSpec) -> str:
    """"head + 2 workers + 1 gpus": the groups of a Ray gang, as its start event says."""
    assert c.ray is not None
    return " + ".join(["head", *(f"{g.replicas} {g.name}" for g in c.ray.workers)])


class RayGang:
    """What a gang runner does for a Ray cluster (`GangRunner`'s state, used here)."""

    engine: LocalEngine
    call: CallSpec
    ref: AttemptRef
    cluster: ClusterSpec
    links: list[NodeLink]
    nets: list[NodeNet]
    slots: list[int]
    keep: tuple[str, float] | None
    reusing: bool
    port: int
    gang: Any

    def _keep_for(self) -> tuple[str, float] | None:
        """Whether this Ray gang's cluster outlives a call that ends well: (the environment
        whose next calls reuse it, or "" for none; for how many seconds)."""
        ray = self.cluster.ray
        if ray is None:
            return None
        reuse = self.call.task.env.reuse
        if reuse is not None:
            return self.call.task.env.name, float(reuse.idle_ttl)
        if ray.keep_after:
            return "", float(ray.keep_after)
        return None

    def _reuse(self, kept: KeptCluster | None) -> None:
        """Run this call's driver on ``kept``'s raylets (None: start a cluster)."""
        if kept is None:
            return
        self.links, self.nets, self.slots, self.port = kept.links, kept.nets, kept.slots, kept.port
        self.links[0].on_message = self._ray_cluster
        self.reusing = True
        self.engine.notify("ray_reused", self.ref.action, {
            "task": self.call.task.name, "master_port": kept.port})

    def _keep_cluster(self) -> None:
        """Hand this call's cluster to the engine for the next call or its clients."""
        assert self.keep is not None
        key, seconds = self.keep
        if not key:  # kept for its clients: its nodes end themselves, engine or not
            for link in self.links:
                link.send({"expire": seconds})
        self.engine.ray_clusters.keep(
            KeptCluster(key, self.links, self.nets, self.slots, self.port), seconds)
        self.links, self.slots = [], []

    def _ray_cluster(self, message: dict[str, Any]) -> None:
        """The head said where its cluster is: the run's events get it (`shoal runs`, the
        UI show the dashboard)."""
        info = message.get("ray")
        if not isinstance(info, dict) or self.cluster.ray is None:
            return
        ray = self.cluster.ray
        nodes = [{"node": k, "group": ray.group_of(k).name,
                  "address": self.nets[slot].address} for k, slot in enumerate(self.slots)]
        self.engine.notify("ray_cluster", self.ref.action, {
            "task": self.call.task.name, "restart": self.gang.restart if self.gang else 0,
            **{k: str(info[k]) for k in ("dashboard_url", "address", "client_address")
               if k in info}, "nodes": nodes})

    def _remove_ray_dirs(self, gang: Any) -> None:
        """A start's nodes' Ray temp dirs, once its nodes have ended (each removes its own
        when it stops; one killed first cannot); a kept cluster's stay with it."""
        if self.links and self.keep is not None:
            return
        from shoal._runtime.node import cluster_temp_dir

        ref = self.ref
        shutil.rmtree(cluster_temp_dir(str(self.engine.home), ref.run, ref.action,
                                       ref.attempt, gang.restart), ignore_errors=True)

    def lost_ray_node(self, first: FirstFailure, restart: int, log_dir: Path) -> FailureInfo:
        """A Ray node whose raylet ended while the driver ran: the node is lost."""
        node = first.node
        assert node is not None and self.cluster.ray is not None
        group = self.cluster.ray.group_of(node).name
        where = self.nets[self.slots[node]].address if node < len(self.slots) else "?"
        how = f"signal {first.signal}" if first.signal else f"exit code {first.exit_code}"
        return FailureInfo(
            task=self.call.task.name, action=self.ref.action, attempt=self.ref.attempt,
            kind="crash", node=node, exit_code=first.exit_code, signal=first.signal,
            message=f"Ray node {node} (group {group!r}, {where}) was lost: its raylet "
                    f"(ray start) ended with {how} while the driver ran (restart {restart}); "
                    f"its log: shoal logs RUN --node {node}",
            log_tail=log_tail(log_dir / f"node{node}.log"))
