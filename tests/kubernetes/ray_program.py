"""Ray environments as a user writes them, compiled to KubeRay RayJobs (a test program).

``dedup`` is a head with two worker groups through the team's Kueue queue: a CPU group of 2
and a GPU group of 1 with resources of its own, a ``runtime_env`` and a timeout; ``solo`` is
a head alone with the environment's resources; ``elastic_ray`` autoscales its one group
between 1 and 4 nodes (no queue: Kueue refuses autoscaling). The bodies never run in these
tests: only their specs are compiled.
"""

from __future__ import annotations

import shoal
from shoal.plugins.ray import (
    AutoscalerOptionsConfig,
    HeadNodeConfig,
    RayJobConfig,
    WorkerNodeConfig,
)

dedup_env = shoal.TaskEnvironment(
    name="dedup",
    image="ghcr.io/example/ray-data:2026.11",
    resources=shoal.Resources(cpu=4, memory="16Gi"),
    env_vars={"DEDUP_SHARDS": "64"},
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}),
    plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(ray_start_params={"log-color": "true"}),
        worker_node_config=[
            WorkerNodeConfig(group_name="cpu", replicas=2),
            WorkerNodeConfig(group_name="gpu", replicas=1,
                             requests=shoal.Resources(cpu=8, memory="64Gi", gpu="H200:1")),
        ],
        runtime_env={"env_vars": {"RAY_DATA_VERBOSE": "1"}, "pip": ["datasketch==1.6.5"]},
        shutdown_after_job_finishes=True,
        ttl_seconds_after_finished=60,
    ),
)

solo_env = shoal.TaskEnvironment(
    name="solo",
    resources=shoal.Resources(cpu=2, memory="8Gi"),
    plugin_config=RayJobConfig(worker_node_config=[]),
)

elastic_ray_env = shoal.TaskEnvironment(
    name="elastic-ray",
    resources=shoal.Resources(cpu=2, memory="8Gi"),
    plugin_config=RayJobConfig(
        worker_node_config=[WorkerNodeConfig(group_name="workers", replicas=2,
                                             min_replicas=1, max_replicas=4)],
        enable_autoscaling=True,
        autoscaler_options=AutoscalerOptionsConfig(
            upscaling_mode=AutoscalerOptionsConfig.UpscalingMode.CONSERVATIVE,
            idle_timeout_seconds=60),
    ),
)


@dedup_env.task(timeout=3600)
def dedup(shards: int = 64) -> int:
    raise NotImplementedError


@solo_env.task
def count() -> int:
    raise NotImplementedError


@elastic_ray_env.task
def scale() -> int:
    raise NotImplementedError
