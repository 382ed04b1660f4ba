"""Ray clusters that outlive their call on the local engine, and only for as long as asked.

Two settings keep a Ray gang's nodes after its driver ended well:
- ``TaskEnvironment(reusable=ReusePolicy(replicas=1, idle_ttl=T))``: the environment's next
  call runs its driver on the same raylets (no cluster start), one call at a time; the cluster
  ends once T seconds pass without a call;
- ``RayJobConfig(shutdown_after_job_finishes=True, ttl_seconds_after_finished=T)``: the
  cluster stays T seconds for ``ray://`` clients (KubeRay's TTL), then ends; no later call
  reuses it (each call of such an environment starts its own, as on Kubernetes).
Either way it ends when the engine closes (the end of ``shoal run``), never later, and a
cluster that failed is never kept. A kept cluster holds no share of the machine's pool while
idle (its raylets only wait): the call that reuses it is admitted again first. Its nodes'
launchers stay as they are: the workers keep watching their raylets, the head waits for its
next driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field

from shoal._engines.local.gangs.node_link import NodeLink
from shoal._engines.local.gangs.node_net import NodeNet

__all__ = ["KeptCluster", "KeptClusters"]


@dataclass(eq=False)
class KeptCluster:
    """The launchers of a Ray gang whose driver is done, and where they sit."""

    key: str  # the environment's name: whose calls may reuse it ("" for none)
    links: list[NodeLink]
    nets: list[NodeNet]
    slots: list[int]
    port: int  # the head's GCS port (the gang's master port)
    expiry: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        return all(link.alive for link in self.links)

    async def close(self) -> None:
        """End every node (each launcher stops its raylet on EOF)."""
        await asyncio.gather(*(link.close() for link in self.links))


class KeptClusters:
    """The engine's kept Ray clusters: taken by the next call that may reuse one, ended at
    their TTL or with the engine."""

    def __init__(self) -> None:
        self._kept: list[KeptCluster] = []
        self._closing: set[asyncio.Task[None]] = set()  # clusters found dead, being ended

    def keep(self, cluster: KeptCluster, seconds: float) -> None:
        self._kept.append(cluster)
        cluster.expiry = asyncio.ensure_future(self._expire(cluster, seconds))

    def take(self, key: str) -> KeptCluster | None:
        """An idle, live cluster ``key``'s calls may reuse (it is theirs until kept again)."""
        for cluster in list(self._kept):
            if cluster.key != key or not key:
                continue
            self._kept.remove(cluster)
            if cluster.expiry is not None:
                cluster.expiry.cancel()
            if cluster.alive:
                return cluster
            task = asyncio.ensure_future(cluster.close())  # a node died while idle: afresh
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return None

    async def _expire(self, cluster: KeptCluster, seconds: float) -> None:
        await asyncio.sleep(seconds)
        with contextlib.suppress(ValueError):
            self._kept.remove(cluster)
        await cluster.close()

    @property
    def detached(self) -> bool:
        """Whether a cluster was left to its clients past the engine's close (then the
        engine's lifeline must stay open until this process exits)."""
        return bool(_DETACHED)

    async def close(self) -> None:
        """End the clusters kept for reuse; leave those kept for their clients to end
        themselves at their TTL, or when this process exits (the lifeline), whichever is
        first: Flyte code starts a cluster in one run and connects to it from the next."""
        kept, self._kept = self._kept, []
        for cluster in kept:
            if cluster.expiry is not None:
                cluster.expiry.cancel()
        for cluster in kept:
            if not cluster.key and cluster.alive:
                for link in cluster.links:  # the launchers must not see their socket close
                    sock = link.writer.get_extra_info("socket")
                    if sock is not None:
                        _DETACHED.append(os.dup(sock.fileno()))
        await asyncio.gather(*(cluster.close() for cluster in kept
                               if cluster.key or not cluster.alive))


# Control sockets of clusters left to their clients past their engine: held open (never
# read) until this process exits, which the nodes' lifeline sees.
_DETACHED: list[int] = []
