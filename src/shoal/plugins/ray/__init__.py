"""``shoal.plugins.ray``: what Flyte 2 code imports as ``flyteplugins.ray``.

``TaskEnvironment(plugin_config=RayJobConfig(worker_node_config=[WorkerNodeConfig(
group_name="workers", replicas=2)]))`` runs each of the environment's calls on a Ray cluster of
its own: a head and two workers, each a simulated node of one gang on the local engine, an
allocation's nodes on Slurm, a KubeRay RayJob on Kubernetes; the body is the Ray driver
(see `shoal.plugins.ray.task` and docs/ray.md). Needs ``pip install 'shoal[ray]'``.
"""

from shoal.plugins.ray.task import (
    AutoscalerOptionsConfig,
    HeadNodeConfig,
    RayJobConfig,
    WorkerNodeConfig,
)

__all__ = ["AutoscalerOptionsConfig", "HeadNodeConfig", "RayJobConfig", "WorkerNodeConfig"]
