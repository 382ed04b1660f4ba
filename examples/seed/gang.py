"""Gang scheduling: every node of a multi-node job starts together, or none starts.

    shoal run examples/seed/gang.py gang_check                              # 4 workers
    shoal run examples/seed/gang.py gang_check --override gang_workers.replicas=8
    shoal run examples/seed/gang.py gang_check --dry-run                    # the local plan
    shoal run examples/seed/gang.py gang_check --engine kubernetes --dry-run \\
        --out manifests/ --store s3://my-bucket/shoal                       # the JobSet

Each worker notes the time its task body began; one all-reduce gathers them and rank 0 returns
how far apart the first and the last worker started.

What the ``kueue.x-k8s.io/queue-name`` label does:
- On Kubernetes it is the whole opt-in. Shoal puts Kueue's labels on the JobSet itself (where
  Kueue reads them; the pods do not get them), and Kueue admits the JobSet as one workload once
  that queue has quota for every pod of it, so no node sits idle waiting for the rest.
- On the local engine there are no queues: one pool (this machine's CPUs, memory and GPUs) per
  run. The label is checked (a misspelled Kueue key is an error) and shown by ``--dry-run``, but
  it changes nothing; every clustered call is admitted as one request, all its nodes or none,
  whether or not it names a queue. Only ``kueue.x-k8s.io/priority-class`` acts locally, as the
  gang's priority, from the classes in ``SHOAL_PRIORITY_CLASSES``.
"""

from __future__ import annotations

import time

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

QUEUE = "pretraining"  # a Kueue LocalQueue in the job's namespace
WORKERS = 4  # nodes (pods) in the gang

gang = ClusteredTaskEnvironment(
    name="gang_workers",
    image=flyte.Image.from_debian_base().with_pip_packages("torch"),
    env_vars={"OMP_NUM_THREADS": "1"},
    # On GPU nodes: Resources(cpu=2, memory="8Gi", gpu="H200:1").
    resources=flyte.Resources(cpu=1, memory="1Gi"),
    replicas=WORKERS,
    nproc_per_node=1,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
    failure_policy=ClusterFailurePolicy(max_restarts=0),
    # This label is the whole opt-in: the cluster's queue admits the job as one gang.
    pod_template=flyte.PodTemplate(labels={"kueue.x-k8s.io/queue-name": QUEUE}),
)


@gang.task
def gang_check() -> dict[str, float]:
    """Every worker reports when it began; rank 0 returns the count and the spread."""
    began = time.time()  # wall clock: comparable across nodes whose clocks are synchronised
    import torch
    import torch.distributed as dist

    ctx = flyte.ctx()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    starts = torch.zeros(world, dtype=torch.float64)
    starts[rank] = began
    dist.all_reduce(starts)  # a sum in which each worker filled in only its own slot
    spread = float(starts.max() - starts.min())
    print(f"[rank {rank}/{world}] node {ctx.node_rank}/{ctx.nnodes}: all {world} workers "
          f"began within {spread:.2f} s", flush=True)

    dist.destroy_process_group()
    return {"workers": float(world), "start_spread_s": spread}
