"""The pretrain example's training loop (``examples/pretrain/training.py``) with no Shoal: the
baseline that ``training_throughput.py`` starts with two bare ``torchrun`` invocations, one per
simulated node.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 \\
        --node-rank=0 --master-addr=127.0.0.1 --master-port=29500 --rdzv-backend=static \\
        benchmarks/programs_pretrain_bare.py --data DIR --steps 150   # and --node-rank=1

``DIR`` is a folder ``corpus.build`` wrote. ``gpu.sh`` starts it on one GPU node as
``torchrun --standalone --nproc-per-node=N ... --model small`` (NCCL, bf16 autocast). Every
rank calls ``training.train`` exactly as ``programs_pretrain_shoal.py`` does under ``shoal run``
(model "tiny" unless ``--model``, DDP, no checkpoint), and rank 0 prints one
``PRETRAIN-RESULT {json}`` line. Its figures:

- ``tokens_per_s``: the loop's own steady-state figure (``TrainStats.tokens_per_s``: the median
  of the per-log-interval rates, the first interval left out);
- ``window_tokens_per_s``: every token from the first logged step to the last over the wall
  time between the two (rank 0's clock at each log line): a mean, so a stall that one interval
  takes (a checkpoint save) counts in full, where the median would hide it;
- ``seconds`` (the loop's), ``train_call_s`` (the whole ``train`` call: model, DDP, loop);
- what ran: ``backend`` (``nccl`` on GPUs), ``device``, ``world_size``, ``flops_per_token``
  (``GPT.flops_per_token``: what model FLOPs utilisation counts) and ``tokens_per_step``.
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "pretrain"))

MARK = "PRETRAIN-RESULT "


def config(data: Path, steps: int, batch_size: int, log_every: int,
           checkpoint_every: int = 0, model: str = "tiny") -> Any:
    """The example's TrainConfig for ``model`` ("tiny" on CPU, "small" on GPUs), its
    vocabulary read from the data folder."""
    import dataclasses

    import training

    if model not in training.MODELS:
        raise SystemExit(f"--model {model!r}: not one of {sorted(training.MODELS)}; pass "
                         "--model tiny (CPU) or --model small (GPU)")
    vocab = json.loads((data / "meta.json").read_text())["vocab_size"]
    return training.TrainConfig(
        model=dataclasses.replace(training.MODELS[model], vocab_size=vocab), steps=steps,
        batch_size=batch_size, checkpoint_every=checkpoint_every, log_every=log_every)


class Recorder(StepClock):
    """The ``log`` callback given to ``training.train``: prints rank 0's lines and notes the
    wall-clock time of each logged step."""

    def result(self, stats: Any, started: float, cfg: Any) -> dict[str, Any]:
        import torch
        import torch.distributed as dist
        from gpt import GPT

        per_step = cfg.batch_size * cfg.model.block_size * dist.get_world_size()
        window, steps = self.window(per_step)
        with torch.device("meta"):  # the shape is all it takes
            flops_per_token = GPT(cfg.model).flops_per_token()
        return {"tokens_per_s": stats.tokens_per_s, "window_tokens_per_s": window,
                "window_steps": steps, "seconds": stats.seconds,
                "start_step": stats.start_step, "steps": stats.steps,
                "train_call_s": time.perf_counter() - started,
                # What ran, for gpu.sh's report: the process group's backend (the NCCL
                # path, or gloo on CPU), the device, the FLOPs that MFU counts.
                "backend": str(dist.get_backend()), "world_size": dist.get_world_size(),
                "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                "flops_per_token": flops_per_token, "tokens_per_step": per_step}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--model", default="tiny", help="tiny (CPU) or small (GPU)")
    args = ap.parse_args()

    import corpus
    import torch.distributed as dist
    import training

    _, backend = training.setup_device()
    dist.init_process_group(backend=backend)  # RANK, WORLD_SIZE, MASTER_* come from torchrun
    rank = dist.get_rank()
    folder = Path(args.data)
    tokens = corpus.load_tokens(folder, "train")
    cfg = config(folder, args.steps, args.batch_size, args.log_every, model=args.model)
    recorder = Recorder(rank == 0)
    started = time.perf_counter()
    stats, _ = training.train(cfg, tokens, checkpoint=None, log=recorder)
    out = recorder.result(stats, started, cfg)
    if rank == 0:
        print(MARK + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
