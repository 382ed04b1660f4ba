"""An elastic gang as a Flyte user writes it (a test program): ``Elastic(nnodes="2:4")``, 4
nodes of 8 H200s at most and 2 at least, through the team's Kueue queue, 2 restarts. Never
run here: only compiled, as its first start (4 nodes) and as the start after a lost node (3).
"""

from __future__ import annotations

import shoal
from shoal.plugins.pytorch import Elastic

elastic_env = shoal.TaskEnvironment(
    name="pretrain-elastic",
    image="ghcr.io/example/pretrain:2026.11",
    resources=shoal.Resources(cpu=64, memory="512Gi", gpu="H200:8", shm="16Gi"),
    plugin_config=Elastic(nnodes="2:4", nproc_per_node=8, max_restarts=2),
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "research"}),
)


@elastic_env.task(timeout=86400)
async def train(steps: int = 100_000) -> float:
    raise NotImplementedError
