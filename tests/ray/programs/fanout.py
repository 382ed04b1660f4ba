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
    return {"alive": len(alive), "nodes_used": len(set(landed)), "cpus": ray.cluster_resources().get("CPU"),
            "pod_ip": os.environ.get("MY_POD_IP"), "nnodes": ctx.nnodes, "world": ctx.world_size,
            "host": socket.gethostname()}
