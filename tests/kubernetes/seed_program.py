"""The seed's three environments at full size, as a user writes them (a test program).

``data`` prepares shards on a big CPU node (cached); ``pretrain`` trains across 4 nodes of 8
H200s through the team's Kueue queue, resuming after preemption; ``driver`` calls both.
The task bodies never run in these tests: only their specs are compiled.
"""

from __future__ import annotations

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

data_env = shoal.TaskEnvironment(
    name="data",
    resources=shoal.Resources(cpu=16, memory="64Gi", disk="200Gi"),
    cache="auto",
)

pretrain_env = ClusteredTaskEnvironment(
    name="pretrain",
    image="ghcr.io/example/pretrain:2026.11",
    resources=shoal.Resources(cpu=64, memory="512Gi", gpu="H200:8", shm="16Gi"),
    replicas=4,
    nproc_per_node=8,
    runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=1, resume_after_preemption=True),
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}),
)

driver_env = shoal.TaskEnvironment(
    name="driver",
    resources=shoal.Resources(cpu=2, memory="4Gi"),
    depends_on=[data_env, pretrain_env],
)


@data_env.task
async def prepare(shards: int = 64) -> shoal.Dir:
    raise NotImplementedError


@pretrain_env.task(timeout=86400)
async def train(data: shoal.Dir, steps: int = 100_000) -> float:
    raise NotImplementedError


@driver_env.task
async def main(shards: int = 64) -> float:
    data = await prepare(shards=shards)
    return await train(data)
