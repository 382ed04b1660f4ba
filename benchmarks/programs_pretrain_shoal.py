"""The pretrain example's training loop under ``shoal run``: the Shoal side of
``training_throughput.py``.

    shoal run benchmarks/programs_pretrain_shoal.py train --data DIR --steps 150
    shoal run benchmarks/programs_pretrain_shoal.py train --data DIR --steps 150 \\
        --checkpoint-every 50

The gang is the example's (``examples/pretrain/pipeline.py``'s ``pretrain_env`` on CPU: 2 nodes
x 2 ranks, torchrun's static rendezvous, ``OMP_NUM_THREADS=1``; ``gpu.sh`` sets the example's
``PRETRAIN_GPU=1 PRETRAIN_NODES=1 PRETRAIN_GPUS_PER_NODE=N`` for one node of N GPUs, each rank
given its own GPU, or ``PRETRAIN_NODES=1 PRETRAIN_GPUS_PER_NODE=N`` alone for N CPU ranks in
its dry run), and every rank calls
``training.train`` exactly as ``programs_pretrain_bare.py`` does under bare torchrun: the same
config (model "tiny", DDP), the same data folder (``DIR``, written once by ``corpus.build``,
passed as a plain path so no upload or download is timed), no checkpoint. With
``--checkpoint-every N`` the loop saves sharded checkpoints asynchronously through
``shoal.ctx().checkpoint`` every N steps, as the example does: what durable training costs.
With ``--log-metrics true`` every rank reports its loss, grad norm and lr for every step and
its tokens/s per interval through ``shoal.log_metrics``, as the example does.
Rank 0 prints the same ``PRETRAIN-RESULT {json}`` line as the bare script and returns it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

# The example's modules, imported as its pipeline imports them (its folder on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "pretrain"))

# The example's variables (examples/pretrain/pipeline.py), with this benchmark's CPU default.
GPU = os.environ.get("PRETRAIN_GPU") == "1"
NODES = int(os.environ.get("PRETRAIN_NODES", "2"))
PROCS = int(os.environ.get("PRETRAIN_GPUS_PER_NODE", "2"))

pretrain_env = ClusteredTaskEnvironment(
    name="pretrain",
    # With GPUs the request is what hands each node's ranks the machine's GPUs (the local
    # engine's CUDA_VISIBLE_DEVICES); one CPU a rank, as on CPU, fits any GPU machine.
    resources=shoal.Resources(cpu=1, memory="2Gi", gpu=PROCS if GPU else None),
    replicas=NODES,
    nproc_per_node=PROCS,
    runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=0),  # a failure is a failed measurement
    env_vars={"OMP_NUM_THREADS": "1"},
)


@pretrain_env.task
def train(data: str, steps: int = 150, batch_size: int = 8, log_every: int = 10,
          checkpoint_every: int = 0, log_metrics: bool = False,
          model: str = "tiny") -> dict[str, Any]:
    """Every rank trains; rank 0 returns the loop's figures."""
    import json

    import corpus
    import torch.distributed as dist
    import training
    from programs_pretrain_bare import MARK, Recorder, config

    ctx = shoal.ctx()
    _, backend = training.setup_device()
    dist.init_process_group(backend=backend)  # RANK, WORLD_SIZE, MASTER_* are set by Shoal
    rank = dist.get_rank()
    folder = Path(data)
    tokens = corpus.load_tokens(folder, "train")
    cfg = config(folder, steps, batch_size, log_every, checkpoint_every, model)
    recorder = Recorder(rank == 0)
    started = time.perf_counter()
    stats, _ = training.train(cfg, tokens,
                              checkpoint=ctx.checkpoint if checkpoint_every else None,
                              first_attempt=not ctx.restart_attempt, log=recorder,
                              metrics=shoal.log_metrics if log_metrics else None)
    out = recorder.result(stats, started, cfg)
    if rank == 0:
        print(MARK + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return out
