"""The fine-tuning example's DeepSpeed loop (``examples/finetune/training.py``) with no Shoal:
the baseline that ``finetune_throughput.py`` starts with two bare ``torchrun`` invocations, one
per simulated node.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 \\
        --node-rank=0 --master-addr=127.0.0.1 --master-port=29500 --rdzv-backend=static \\
        benchmarks/programs_finetune_bare.py --data DIR --steps 110   # and --node-rank=1

``DIR`` is a folder ``shapes.build`` wrote. Every rank calls ``deepspeed.init_distributed``
and ``training.finetune`` exactly as ``programs_finetune_shoal.py`` does under ``shoal run``
(model "tiny", DeepSpeed ZeRO-2, the language model's weights fresh rather than pretrained,
which changes no step's cost; no checkpoint), and rank 0 prints one ``FINETUNE-RESULT {json}``
line. Its figures:

- ``samples_per_s``: the loop's own steady-state figure (``FinetuneStats.samples_per_s``: the
  median of the per-log-interval rates, the first interval left out);
- ``window_samples_per_s``: every picture from the first logged step to the last over the
  wall time between the two (rank 0's clock at each log line): a mean, so a stall inside the
  window (a checkpoint save) counts in full;
- ``seconds`` (the loop's), ``train_call_s`` (the whole ``finetune`` call: model, DeepSpeed's
  initialize, loop).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import StepClock  # benchmarks/_common.py, next to this script

# The example's modules, imported as its pipeline imports them (its folder on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "finetune"))

MARK = "FINETUNE-RESULT "


def config(steps: int, batch_size: int, log_every: int, checkpoint_every: int = 0) -> Any:
    """The example's FinetuneConfig for model "tiny" on this machine's device."""
    import torch
    import training

    return training.FinetuneConfig(
        model=training.model_config("tiny"), steps=steps, batch_size=batch_size,
        bf16=torch.cuda.is_available(), checkpoint_every=checkpoint_every,
        log_every=log_every)


def result(clock: StepClock, stats: Any, started: float, cfg: Any) -> dict[str, float]:
    import torch.distributed as dist

    window, steps = clock.window(cfg.batch_size * dist.get_world_size())
    return {"samples_per_s": stats.samples_per_s, "window_samples_per_s": window,
            "window_steps": steps, "seconds": stats.seconds, "start_step": stats.start_step,
            "steps": stats.steps, "train_call_s": time.perf_counter() - started}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=110)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()

    import deepspeed
    import shapes
    import torch.distributed as dist
    import training

    _, backend = training.setup_device()
    deepspeed.init_distributed(dist_backend=backend)  # RANK, WORLD_SIZE, MASTER_*: torchrun's
    rank = dist.get_rank()
    data = shapes.load(Path(args.data), "train")
    cfg = config(args.steps, args.batch_size, args.log_every)
    clock = StepClock(rank == 0)
    started = time.perf_counter()
    stats, _ = training.finetune(cfg, data, None, durable=None, log=clock)
    out = result(clock, stats, started, cfg)
    if rank == 0:
        print(MARK + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
