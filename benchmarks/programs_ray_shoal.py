"""The Shoal side of ``ray_cluster.py``: a Ray cluster of a head and 2 workers, 1 CPU each,
whose body runs one ``@ray.remote`` task.

    shoal run benchmarks/programs_ray_shoal.py first_task

Node 0 is the head and runs the body as the Ray driver, already connected once every node has
joined; the cluster is torn down when the body returns. The body is the bare driver's
(``programs_ray_bare.first_task``, next to this file), with the same marks (``BODY``,
``FIRST_TASK``, ``NODES``) in the driver's log.
"""

from __future__ import annotations

import shoal
from shoal.plugins.ray import RayJobConfig, WorkerNodeConfig

ray_env = shoal.TaskEnvironment(
    name="ray_env",
    resources=shoal.Resources(cpu=1),
    plugin_config=RayJobConfig(worker_node_config=[
        WorkerNodeConfig(group_name="workers", replicas=2, requests=shoal.Resources(cpu=1)),
    ]),
)


@ray_env.task
def first_task() -> float:
    """One remote task on the cluster; the wall-clock time its result was back."""
    from programs_ray_bare import first_task as body

    return body()


if __name__ == "__main__":
    shoal.init()
    print(shoal.run(first_task).outputs()[0])
