"""A Ray cluster per call for the Slurm engine's tests: a head and one worker, 1 CPU each,
as Flyte 2 code writes it (the body calls ``@ray.remote`` functions, no ``ray.init``).
``two_at_once`` makes two such calls at the same time, two jobs on the same nodes."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import shoal
from shoal.plugins.ray import RayJobConfig, WorkerNodeConfig

ray_env = shoal.TaskEnvironment(
    name="ray_slurm", resources=shoal.Resources(cpu=1, memory="1Gi"),
    plugin_config=RayJobConfig(
        worker_node_config=[WorkerNodeConfig(group_name="workers", replicas=1)]))

driver = shoal.TaskEnvironment(name="ray_driver", depends_on=[ray_env])


@ray_env.task
def fan_out(n: int = 6, hold: str = "") -> dict[str, Any]:
    """``n`` remote calls, each pinned to one of the cluster's live nodes by turns: which
    nodes are alive, where the calls ran. With ``hold``, the body first writes that file and
    waits until it is gone."""
    import ray

    @ray.remote(num_cpus=1)
    def where(i: int) -> tuple[int, str]:
        time.sleep(0.2)
        return i * i, ray.get_runtime_context().get_node_id()

    alive = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    if hold:
        with open(hold, "w") as f:
            f.write(ray.get_runtime_context().get_node_id())
        while os.path.exists(hold):
            time.sleep(0.1)
    # Pinned by turns to each live node: Ray's SPREAD is a preference, and on a loaded
    # machine a worker whose processes are still starting gets none of a short fan-out.
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    done = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        alive[i % len(alive)], soft=False)).remote(i) for i in range(n)])
    return {"alive": alive, "ran_on": sorted({node for _, node in done}),
            "sum": sum(v for v, _ in done), "job": os.environ.get("SLURM_JOB_ID", "")}


@driver.task
async def two_at_once(n: int = 4) -> list[dict[str, Any]]:
    return list(await asyncio.gather(fan_out.aio(n=n), fan_out.aio(n=n)))
