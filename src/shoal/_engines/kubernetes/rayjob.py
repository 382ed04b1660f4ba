"""A Ray environment's call as a KubeRay ``RayJob`` (``ray.io/v1``): pure, printable.

KubeRay starts the raylets itself (``ray start`` in each pod's first container), so a Ray call
is not a JobSet of node launchers: the RayJob's ``rayClusterSpec`` has the head group and one
worker group per `RayGroupSpec`, each pod built by `pods.pod_template` like every other pod
(the image, resources incl. GPUs and their placement, secrets, the store, the user's template
merged), less the ``command`` KubeRay must be free to set. The task body runs as the Ray job's
entrypoint, ``python -m shoal._runtime.node.ray_job``: KubeRay's submitter runs ``ray job submit``
against the head and Ray starts the entrypoint on the head, where it inherits the head
container's variables. So the head carries the contract's values of node 0 (the same
`NodeEnv` a JobSet's node 0 gets, its master the head's own pod IP and the GCS port), and the
entrypoint runs the same rank program as every engine, as rank 0 of one node.

Shutdown: ``shutdownAfterJobFinishes`` is always true (Shoal never leaves a cluster running,
flyte#3897; Kueue refuses a RayJob without it, kuberay#1813), ``ttlSecondsAfterFinished`` is
the environment's ``ttl_seconds_after_finished`` (default 0). With a Kueue queue the RayJob is
created suspended and Kueue's RayJob webhook rules are checked here (`validate.check_rayjob`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shoal import _contract as contract
from shoal._engines.kubernetes import validate
from shoal._engines.kubernetes.config import KubeConfig
from shoal._engines.kubernetes.pods import pod_template
from shoal._spec.call import ClusterSpec, EnvSpec
from shoal._spec.ray import HEAD, RayGroupSpec, RaySpec

__all__ = ["API_VERSION", "ENTRYPOINT_MODULE", "GCS_PORT", "RAYJOB_NAME_MAX", "rayjob"]

API_VERSION = "ray.io/v1"
ENTRYPOINT_MODULE = "shoal._runtime.node.ray_job"
GCS_PORT = 6379  # KubeRay's head GCS port (its default, which Shoal leaves as it is)
RAYJOB_NAME_MAX = validate.RAYJOB_NAME_MAX
POD_IP_PATH = "status.podIP"
# The head's start options Shoal sets: the dashboard (where `ray job submit` goes) listens on
# the pod's address, not only its loopback.
HEAD_START_PARAMS = {"dashboard-host": "0.0.0.0"}
_UPSCALING = {"Default", "Aggressive", "Conservative"}


def entrypoint(config: KubeConfig) -> str:
    """The entrypoint's command: the launcher's Python (``KubeConfig.launcher_command``)
    running `ENTRYPOINT_MODULE` instead of the launcher."""
    argv = list(config.launcher_command)
    if len(argv) >= 2 and argv[-2] == "-m":
        argv = [*argv[:-1], ENTRYPOINT_MODULE]
    else:
        argv = ["python", "-m", ENTRYPOINT_MODULE]
    return shlex.join(argv)


def _group_env(env: EnvSpec, group: RayGroupSpec) -> EnvSpec:
    """The environment as one group's pods see it: the group's resources and pod template
    where it has its own, the environment's otherwise."""
    return replace(env, resources=group.resources if group.resources is not None
                   else env.resources,
                   pod_template=group.pod_template if group.pod_template is not None
                   else env.pod_template)


def _ray_pod(env: EnvSpec, config: KubeConfig, group: RayGroupSpec, *,
             values: Mapping[str, str], field_refs: Mapping[str, str],
             labels: Mapping[str, str], grace_period: float) -> dict[str, Any]:
    """One group's pod template: Shoal's container first (KubeRay runs Ray in the first
    container) and without a ``command`` (KubeRay's ``ray start`` is the command)."""
    template = pod_template(_group_env(env, group), config, command=[], values=values,
                            field_refs=field_refs, labels=labels, grace_period=grace_period)
    containers = template["spec"]["containers"]
    name = _primary(env, group)
    main = next(c for c in containers if c["name"] == name)
    main.pop("command", None)
    template["spec"]["containers"] = [main, *(c for c in containers if c is not main)]
    return template


def _primary(env: EnvSpec, group: RayGroupSpec) -> str:
    pt = group.pod_template if group.pod_template is not None else env.pod_template
    return str(pt.primary_container_name) if pt is not None else "primary"


def _start_params(group: RayGroupSpec, extra: Mapping[str, str]) -> dict[str, str]:
    return {**extra, **{k: str(v) for k, v in group.start_params}}


def _worker_group(env: EnvSpec, config: KubeConfig, ray: RaySpec, group: RayGroupSpec,
                  values: Mapping[str, str], labels: Mapping[str, str],
                  grace_period: float) -> dict[str, Any]:
    low, high = group.replicas, group.replicas
    if ray.enable_autoscaling:
        low = group.min_replicas if group.min_replicas is not None else group.replicas
        high = group.max_replicas if group.max_replicas is not None else group.replicas
    template = _ray_pod(env, config, group, values=values,
                        field_refs={contract.POD_IP: POD_IP_PATH},
                        labels={**labels, "shoal.dev/ray-group": group.name},
                        grace_period=grace_period)
    return {"groupName": group.name, "replicas": group.replicas, "minReplicas": low,
            "maxReplicas": high, "rayStartParams": _start_params(group, {}),
            "template": template}


def _autoscaler_options(ray: RaySpec) -> dict[str, Any]:
    fields = dict(ray.autoscaler)
    out: dict[str, Any] = {}
    if fields.get("upscaling_mode") in _UPSCALING:
        out["upscalingMode"] = fields["upscaling_mode"]
    if fields.get("idle_timeout_seconds"):
        out["idleTimeoutSeconds"] = int(fields["idle_timeout_seconds"])
    if fields.get("image"):
        out["image"] = str(fields["image"])
    if fields.get("env"):
        out["env"] = [{"name": k, "value": str(v)} for k, v in fields["env"]]
    resources = fields.get("resources")
    if resources is not None:
        amounts = {k: v for k, v in resources.to_k8s().items() if v}
        if amounts:
            out["resources"] = amounts
    return out


def rayjob(*, name: str, config: KubeConfig, env: EnvSpec, cluster: ClusterSpec,
           metadata: dict[str, Any], pod_labels: Mapping[str, str],
           values: Mapping[str, str], deadline: int | None) -> dict[str, Any]:
    """The RayJob of one attempt. ``metadata``: the object's own (name, labels with any Kueue
    queue, annotations); ``values``: the contract's values of node 0, which the head carries
    (its master address is read from the pod, the GCS port is KubeRay's)."""
    ray = cluster.ray
    if ray is None:
        raise ValueError(f"environment {env.name!r} has runtime 'ray' but no RaySpec")
    head_values = {**values, contract.MASTER_PORT: str(GCS_PORT)}
    head_refs = {contract.MASTER_ADDR: POD_IP_PATH, contract.POD_IP: POD_IP_PATH}
    head_values.setdefault(contract.MASTER_ADDR, "")
    head_values[contract.POD_IP] = ""
    head = _ray_pod(env, config, ray.head, values=head_values, field_refs=head_refs,
                    labels={**pod_labels, "shoal.dev/ray-group": HEAD},
                    grace_period=cluster.grace_period)
    # Workers run no Shoal program of their own, only the driver's Ray tasks: they get the
    # store's settings (a task may read and write it), not a rank's identity.
    worker_values = {k: values[k] for k in (contract.HOME, contract.STORE) if k in values}
    worker_values[contract.POD_IP] = ""
    workers = [_worker_group(env, config, ray, g, worker_values, pod_labels,
                             cluster.grace_period) for g in ray.workers]
    cluster_spec: dict[str, Any] = {}
    if ray.enable_autoscaling:
        cluster_spec["enableInTreeAutoscaling"] = True
        options = _autoscaler_options(ray)
        if options:
            cluster_spec["autoscalerOptions"] = options
    cluster_spec["headGroupSpec"] = {
        "rayStartParams": _start_params(ray.head, HEAD_START_PARAMS), "template": head}
    if workers:
        cluster_spec["workerGroupSpecs"] = workers
    spec: dict[str, Any] = {}
    if any(k in metadata["labels"] for k in validate.KUEUE_LABELS):
        spec["suspend"] = True  # Kueue unsuspends it on admission
    spec["entrypoint"] = entrypoint(config)
    if ray.runtime_env:
        import yaml  # only here: `import shoal` stays light

        spec["runtimeEnvYAML"] = yaml.safe_dump(json.loads(ray.runtime_env), sort_keys=True)
    spec["shutdownAfterJobFinishes"] = True
    spec["ttlSecondsAfterFinished"] = int(cluster.ttl_after_finished or 0)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    spec["backoffLimit"] = 0  # retries are the controller's, as for Jobs and JobSets
    spec["rayClusterSpec"] = cluster_spec
    return {"apiVersion": API_VERSION, "kind": "RayJob", "metadata": metadata, "spec": spec}
