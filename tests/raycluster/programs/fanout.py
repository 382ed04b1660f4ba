"""A Ray cluster of a head and two 1-CPU workers; the body fans out remote calls."""

import os
import socket
import time

import ray

import shoal
from shoal.plugins.ray import HeadNodeConfig, RayJobConfig, WorkerNodeConfig

env = shoal.TaskEnvironment(
    name="ray_env",
    resources=shoal.Resources(cpu=1, memory="1Gi"),
    plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(ray_start_params={"log-color": "false"}),
        worker_node_config=[WorkerNodeConfig(group_name="workers", replicas=2)],
    ),
)


@ray.remote(num_cpus=1)
def where(i: int) -> str:
    time.sleep(float(os.environ.get("WHERE_SLEEP", "0.5")))
    return ray.get_runtime_context().get_node_id()


@env.task
def fan_out(n: int = 9) -> dict:
    alive = [node for node in ray.nodes() if node["Alive"]]
    landed = ray.get([where.remote(i) for i in range(n)])
    ctx = shoal.ctx()
    return {"alive": len(alive), "nodes_used": len(set(landed)),
            "cpus": ray.cluster_resources().get("CPU"), "pod_ip": os.environ.get("MY_POD_IP"),
            "nnodes": ctx.nnodes, "world": ctx.world_size, "host": socket.gethostname()}


@env.task
def hold(flag: str) -> str:
    """Say the cluster is up (a file), then run until stopped: a hung body."""
    with open(flag, "w") as f:
        f.write(str(len([n for n in ray.nodes() if n["Alive"]])))
    while True:
        time.sleep(0.2)


@env.task
def hold_remote(flag: str) -> list[int]:
    """Say the cluster is up, then wait on work spread over every node (which a lost node
    never finishes)."""

    @ray.remote(num_cpus=1)
    def forever(i: int) -> int:
        time.sleep(3600)
        return i

    refs = [forever.remote(i) for i in range(3)]
    with open(flag, "w") as f:
        f.write("up")
    return ray.get(refs)


@env.task
def fails() -> int:
    @ray.remote
    def bad(x: int) -> int:
        raise ValueError(f"bad input {x}")

    return ray.get(bad.remote(7))
