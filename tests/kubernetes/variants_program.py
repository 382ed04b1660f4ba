"""Environments that push the compiler's edges (a test program): the longest names, JAX,
torchrun with c10d, a user pod template merged into Shoal's, shm="auto", a built image,
interruptible nodes, secrets. Never run here: only compiled.
"""

from __future__ import annotations

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, JaxRun, TorchRun

LONG = "a-very-long-environment-name-that-uses-all-of-the-sixty-three-c"
assert len(LONG) == 63

long_env = ClusteredTaskEnvironment(
    name=LONG, replicas=1000, nproc_per_node=1,
    resources=shoal.Resources(cpu=1, memory="1Gi"),
    failure_policy=ClusterFailurePolicy(restart_on_host_maintenance=True),
)
long_plain_env = shoal.TaskEnvironment(name=LONG.replace("-c", "-p"))

jax_env = ClusteredTaskEnvironment(
    name="jax_env", replicas=2, nproc_per_node=1, runtime=JaxRun(),
    resources=shoal.Resources(cpu=4, memory="16Gi", shm="auto"),
)

custom_env = ClusteredTaskEnvironment(
    name="custom",
    image=shoal.Image.from_debian_base(python_version="3.11").with_pip_packages("torch"),
    replicas=2, nproc_per_node=2,
    runtime=TorchRun(rdzv_backend="c10d", max_restarts=2),
    resources=shoal.Resources(cpu=(8, 16), memory=("32Gi", "64Gi"), gpu=2),
    env_vars={"NCCL_DEBUG": "WARN"},
    secrets=["WANDB_API_KEY"],
    interruptible=True,
    pod_template=shoal.PodTemplate(
        labels={"team": "research", "kueue.x-k8s.io/queue-name": "spot",
                "kueue.x-k8s.io/priority-class": "low"},
        annotations={"example.com/owner": "ml"},
        pod_spec={
            "containers": [
                {"name": "primary", "env": [{"name": "EXTRA", "value": "1"}],
                 "volumeMounts": [{"name": "datasets", "mountPath": "/datasets"}],
                 "securityContext": {"runAsNonRoot": True}},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "inf"]},
            ],
            "volumes": [{"name": "datasets", "persistentVolumeClaim": {"claimName": "ds"}}],
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east1-b"},
            "tolerations": [{"key": "team", "operator": "Equal", "value": "research",
                             "effect": "NoSchedule"}],
            "priorityClassName": "batch-low",
        },
    ),
)


@long_env.task
def long_task() -> int:
    raise NotImplementedError


@long_plain_env.task
def long_plain_task() -> int:
    raise NotImplementedError


@jax_env.task
def jax_task() -> float:
    raise NotImplementedError


@custom_env.task(timeout=3600)
def custom_task() -> float:
    raise NotImplementedError
