"""Flyte 2's first Ray example, written for this test after Flyte's public one: an async Ray
task that calls a plain task of another environment while its remote calls run (which see
the cluster's ``runtime_env``), with Flyte's head start options and shutdown settings.
Prints ``RESULT`` lines."""

import asyncio

import ray

import shoal as flyte
from shoal.plugins.ray import HeadNodeConfig, RayJobConfig, WorkerNodeConfig


@ray.remote
def f(x: int) -> int:
    import os

    return x * x + int(os.environ["EXTRA"])


task_env = flyte.TaskEnvironment(name="hello_ray", resources=flyte.Resources(cpu=(1, 2)))
ray_env = flyte.TaskEnvironment(
    name="ray_env",
    plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(ray_start_params={"log-color": "True"}),
        worker_node_config=[WorkerNodeConfig(group_name="ray-group", replicas=2)],
        runtime_env={"env_vars": {"EXTRA": "100"}},
        enable_autoscaling=False,
        shutdown_after_job_finishes=True,
        ttl_seconds_after_finished=0,
    ),
    resources=flyte.Resources(cpu=1, memory="1Gi"),
    depends_on=[task_env],
)


@task_env.task()
async def hello_ray() -> str:
    await asyncio.sleep(1)
    return "hello from the plain task"


@ray_env.task
async def hello_ray_nested(n: int = 3) -> list[int]:
    t = asyncio.create_task(hello_ray())
    res = ray.get([f.remote(i) for i in range(n)])
    said = await t
    print(said)
    return [*res, len(said)]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(hello_ray_nested)
    run.wait()
    print("RESULT squares", run.outputs()[0])
