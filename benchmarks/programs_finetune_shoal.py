"""The fine-tuning example's DeepSpeed loop under ``shoal run``: the Shoal side of
``finetune_throughput.py``.

    shoal run benchmarks/programs_finetune_shoal.py train --data DIR --steps 110
    shoal run benchmarks/programs_finetune_shoal.py train --data DIR --steps 110 \\
        --checkpoint-every 50

The gang is the example's (``examples/finetune/pipeline.py``'s ``finetune_env`` on CPU: 2
nodes x 2 ranks, torchrun's static rendezvous, ``OMP_NUM_THREADS=1``), and every rank calls
``training.finetune`` exactly as ``programs_finetune_bare.py`` does under bare torchrun: the
same config (model "tiny", DeepSpeed ZeRO-2), the same data folder (``DIR``, written once by
``shapes.build``, passed as a plain path so no upload or download is timed), no checkpoint.
With ``--checkpoint-every N`` DeepSpeed saves every N steps and ``DeepSpeedCheckpoint`` makes
each save durable (uploaded in the background, the last one waited for), as the example does:
what durable fine-tuning costs. Rank 0 prints the same ``FINETUNE-RESULT {json}`` line as the
bare script and returns it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import shoal
from shoal.clustered import (
    ClusteredTaskEnvironment,
    ClusterFailurePolicy,
    DeepSpeedCheckpoint,
    TorchRun,
)

# The example's modules, imported as its pipeline imports them (its folder on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "finetune"))

finetune_env = ClusteredTaskEnvironment(
    name="finetune",
    resources=shoal.Resources(cpu=1, memory="3Gi"),
    replicas=2,
    nproc_per_node=2,
    runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=0),  # a failure is a failed measurement
    env_vars={"OMP_NUM_THREADS": "1"},
)


@finetune_env.task
def train(data: str, steps: int = 110, batch_size: int = 16, log_every: int = 10,
          checkpoint_every: int = 0) -> dict[str, float]:
    """Every rank fine-tunes; rank 0 returns the loop's figures."""
    import json

    import deepspeed
    import shapes
    import torch.distributed as dist
    import training
    from _common import StepClock
    from programs_finetune_bare import MARK, config, result

    _, backend = training.setup_device()
    deepspeed.init_distributed(dist_backend=backend)  # RANK, WORLD_SIZE, MASTER_*: Shoal's
    rank = dist.get_rank()
    train_data = shapes.load(Path(data), "train")
    cfg = config(steps, batch_size, log_every, checkpoint_every)
    clock = StepClock(rank == 0)
    started = time.perf_counter()
    stats, _ = training.finetune(cfg, train_data, None,
                                 durable=DeepSpeedCheckpoint if checkpoint_every else None,
                                 log=clock)
    out = result(clock, stats, started, cfg)
    if rank == 0:
        print(MARK + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return out
