"""A pipeline as a user writes it for a Slurm cluster (a test program: only its specs are
rendered into sbatch scripts; no task body runs in the unit tests).

``slurm_prep`` is a plain call on one CPU node with a timeout; ``slurm_train`` a 2x4 gang with
GPUs, an image and variables whose values need quoting; ``slurm_driver`` calls both;
``slurm_ray`` a Ray cluster whose groups ask for different resources.
"""

from __future__ import annotations

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun
from shoal.plugins.ray import HeadNodeConfig, RayJobConfig, WorkerNodeConfig

prep_env = shoal.TaskEnvironment(
    name="slurm_prep",
    resources=shoal.Resources(cpu=1.5, memory="1536Mi"),
)

train_env = ClusteredTaskEnvironment(
    name="slurm_train",
    image="registry.example/train:1",
    resources=shoal.Resources(cpu=(6, 8), memory=("24Gi", "32Gi"), gpu="H200:4"),
    env_vars={"GREETING": "it's a \"quoted\" value with  two spaces",
              "EMPTY": "", "DOLLAR": "$HOME and `date` stay as written"},
    replicas=2,
    nproc_per_node=4,
    runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=2, resume_after_preemption=True,
                                        grace_period=45.5),
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/priority-class": "high"}),
)

# The head takes the environment's resources; "big" asks for more CPUs and memory, "gpus"
# for a GPU: each node of the job asks for the most of each.
ray_env = shoal.TaskEnvironment(
    name="slurm_ray",
    resources=shoal.Resources(cpu=2, memory="2Gi"),
    plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(ray_start_params={"log-color": "false"}),
        worker_node_config=[
            WorkerNodeConfig(group_name="big", replicas=1,
                             requests=shoal.Resources(cpu=6, memory="3Gi")),
            WorkerNodeConfig(group_name="gpus", replicas=2,
                             requests=shoal.Resources(cpu=1, gpu="H200:1"))]),
)

driver_env = shoal.TaskEnvironment(name="slurm_driver", depends_on=[prep_env, train_env])


@prep_env.task(timeout=600)
async def prepare(shards: int = 4) -> int:
    return shards


@train_env.task
async def train(shards: int) -> float:
    return float(shards)


@train_env.task(timeout=7200)
async def train_briefly(shards: int) -> float:
    return float(shards)


@ray_env.task
async def ray_count(n: int = 4) -> int:
    return n


@driver_env.task
async def main(shards: int = 4) -> float:
    return await train(await prepare(shards=shards))
