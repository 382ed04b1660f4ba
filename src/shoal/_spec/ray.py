"""A Ray cluster as a gang: the engine-independent description ``RayJobConfig`` makes.

A Ray environment's call runs as a gang whose node 0 is the Ray head and whose other nodes are
the worker groups' replicas, in the order the groups were given. Every node runs a raylet
(``ray start --block``) with its group's share of the machine; node 0 also runs the task body
as the Ray driver, already connected. The call ends when the body does: the raylets are then
stopped, on every engine, with the gang. Nothing here does I/O or imports ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HEAD", "OWNED_START_PARAMS", "RayGroupSpec", "RaySpec", "node_config", "nodes_config"]

HEAD = "head"  # the group name of the head node

# `ray start` options Shoal sets itself on every engine: each node's address and ports are
# chosen per cluster (two clusters on one machine or one Slurm node must not clash), its temp
# dir is the node's own, its share of CPUs, memory and GPUs comes from the environment's
# resources, and the head is the gang's node 0. A user's ``ray_start_params`` may not set them.
OWNED_START_PARAMS = {
    "address": "the workers join the head of their own gang",
    "head": "node 0 of the gang is the head",
    "block": "every raylet runs under the node's launcher",
    "port": "the head's GCS port is chosen per cluster",
    "node-ip-address": "each node's address is the engine's",
    "node-manager-port": "ports are chosen per node",
    "object-manager-port": "ports are chosen per node",
    "runtime-env-agent-port": "ports are chosen per node",
    "dashboard-agent-grpc-port": "ports are chosen per node",
    "dashboard-agent-listen-port": "ports are chosen per node",
    "metrics-export-port": "ports are chosen per node",
    "dashboard-port": "the dashboard's port is chosen per cluster (shoal runs shows its URL)",
    "dashboard-host": "the dashboard listens on the head's address",
    "ray-client-server-port": "the client server's port is chosen per cluster",
    "min-worker-port": "ports are chosen per node",
    "max-worker-port": "ports are chosen per node",
    "worker-port-list": "ports are chosen per node",
    "gcs-server-port": "the head's GCS port is chosen per cluster",
    "temp-dir": "each node has its own temp dir, removed with it",
    "storage": "each node has its own temp dir, removed with it",
    "plasma-directory": "each node has its own temp dir, removed with it",
    "num-cpus": "a node's CPUs are its group's resources (requests=, or the environment's)",
    "num-gpus": "a node's GPUs are its group's resources (requests=, or the environment's)",
    "memory": "a node's memory is its group's resources (requests=, or the environment's)",
}


@dataclass(frozen=True)
class RayGroupSpec:
    """One kind of Ray node: the head, or a worker group of ``replicas`` nodes."""

    name: str  # HEAD, or the worker group's name
    replicas: int
    # ``ray start`` options the user gave (``--KEY=VALUE``), sorted by key; none Shoal owns.
    start_params: tuple[tuple[str, str], ...] = ()
    resources: Any = None  # shoal.Resources of each node (requests, limits); None: the env's
    pod_template: Any = None  # Kubernetes only: the group's pods' template
    min_replicas: int | None = None  # with autoscaling (Kubernetes): the fewest nodes
    max_replicas: int | None = None  # with autoscaling (Kubernetes): the most nodes


@dataclass(frozen=True)
class RaySpec:
    """The Ray cluster a call runs on: its groups and what the driver is given."""

    head: RayGroupSpec
    workers: tuple[RayGroupSpec, ...]
    runtime_env: str = ""  # JSON of Ray's runtime_env for the driver's job; "": none
    enable_autoscaling: bool = False
    autoscaler: tuple[tuple[str, Any], ...] = ()  # Kubernetes: AutoscalerOptionsConfig fields
    # Seconds the cluster outlives its call (``ray://`` clients may use it meanwhile); None:
    # it ends with the call.
    keep_after: int | None = None

    @property
    def groups(self) -> tuple[RayGroupSpec, ...]:
        return (self.head, *self.workers)

    @property
    def nodes(self) -> int:
        return 1 + sum(w.replicas for w in self.workers)

    def group_of(self, node_rank: int) -> RayGroupSpec:
        """The group node ``node_rank`` of the gang belongs to (0: the head)."""
        if node_rank == 0:
            return self.head
        left = node_rank - 1
        for group in self.workers:
            if left < group.replicas:
                return group
            left -= group.replicas
        raise IndexError(f"node {node_rank} is past the cluster's {self.nodes} nodes")


def nodes_config(spec: RaySpec, env_resources: Any) -> str:
    """The ``SHOAL_RAY_NODES`` JSON every engine gives every node of the gang: `node_config`
    of each node, by node rank."""
    import json

    return json.dumps([node_config(spec, k, env_resources) for k in range(spec.nodes)],
                      separators=(",", ":"))


def node_config(spec: RaySpec, node_rank: int, env_resources: Any) -> dict[str, Any]:
    """What node ``node_rank``'s raylet is started with: its group, the user's start
    options, its share of CPUs, GPUs and memory (its group's resources, else the
    environment's; CPUs rounded up to a whole one, as Ray counts them), and, on the head, the
    driver's runtime_env. Ports are not here: each node's launcher picks its own free ones,
    so two clusters on one machine never clash; the head's GCS port is the gang's master
    port."""
    import math

    group = spec.group_of(node_rank)
    r = group.resources if group.resources is not None else env_resources
    cpu = r.cpu_request if r is not None and r.cpu_request is not None else 1.0
    memory = r.memory_request_bytes if r is not None else None
    out: dict[str, Any] = {
        "group": group.name,
        "start_params": [list(p) for p in group.start_params],
        "num_cpus": max(1, math.ceil(float(cpu) - 1e-9)),
        "num_gpus": int(r.gpu_count) if r is not None else 0,
    }
    if memory:
        out["memory"] = int(memory)
    if node_rank == 0 and spec.runtime_env:
        out["runtime_env"] = spec.runtime_env
    return out
