"""A Ray call on a head and one worker node that holds its cluster up until told to end, so a
test can open the dashboard while the call runs.

Run it as ``shoal run dashboard.py hold --gate DIR``: the body (the Ray driver, on the
head) waits for ``DIR/go`` (60 s at most), then returns the CPUs the cluster counts, which
proves the worker node joined.
"""

from __future__ import annotations

import time
from pathlib import Path

import shoal
from shoal.plugins.ray import HeadNodeConfig, RayJobConfig, WorkerNodeConfig

env = shoal.TaskEnvironment(
    name="rayd", resources=shoal.Resources(cpu=1, memory="1Gi"),
    plugin_config=RayJobConfig(head_node_config=HeadNodeConfig(),
                               worker_node_config=[WorkerNodeConfig(group_name="workers",
                                                                    replicas=1)]))


@env.task
def hold(gate: str) -> int:
    import ray

    deadline = time.monotonic() + 60
    while not Path(gate, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return int(ray.cluster_resources().get("CPU", 0))
