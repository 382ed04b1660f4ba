"""Flyte 2's reusable Ray cluster, written for this test after Flyte's public example: a
driver gathers two calls of a Ray environment with ``ReusePolicy(replicas=1)``; both run on
one cluster, the second without a cluster start. Prints ``RESULT`` lines."""

import asyncio
import os

import ray

import shoal as flyte
from shoal.plugins.ray import HeadNodeConfig, RayJobConfig, WorkerNodeConfig


@ray.remote
def square(x: int) -> int:
    return x * x


ray_env = flyte.TaskEnvironment(
    name="reusable_ray_env",
    plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(),
        worker_node_config=[WorkerNodeConfig(group_name="ray-group", replicas=1)],
    ),
    resources=flyte.Resources(cpu=1, memory="1Gi"),
    reusable=flyte.ReusePolicy(replicas=1, idle_ttl=60, scope="run"),
)
driver_env = flyte.TaskEnvironment(name="driver_env", depends_on=[ray_env])


@ray_env.task
async def sum_of_squares(n: int) -> list[int]:
    total = sum(ray.get([square.remote(i) for i in range(n)]))
    return [total, os.getpid(), len([x for x in ray.nodes() if x["Alive"]])]


@driver_env.task
async def driver(a: int = 5, b: int = 8) -> list[list[int]]:
    first, second = await asyncio.gather(sum_of_squares(a), sum_of_squares(b))
    return [first, second]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(driver, a=5, b=8)
    run.wait()
    first, second = run.outputs()[0]
    print("RESULT sums", first[0], second[0])
    print("RESULT nodes", first[2], second[2])
    print("RESULT run", run.name)
