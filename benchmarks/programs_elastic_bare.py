"""The elastic gang's step body, and that body as a plain torch script: the bare torchrun side
of ``elastic_recovery.py``, started as one ``torchrun --nnodes=1:2`` agent per simulated node.

    python -m torch.distributed.run --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=127.0.0.1:PORT --rdzv-id=ID --max-restarts=1 \\
        benchmarks/programs_elastic_bare.py --out DIR --every 5

``loop`` is what both sides run (``programs_elastic_shoal.py`` calls it inside a Shoal task): a
linear model fitted with its gradients all-reduced by hand over gloo, paced to ``STEP_SECONDS``
of sleep a step, each rank appending ``<unix time> <restart> <step> <world>`` to
``DIR/steps-rank<R>.txt`` once a step is done, and rank 0 saving the state (step and weights)
every ``every`` steps through ``save``. A start resumes after the step of the state it loaded.
The loop runs until ``DIR/stop`` exists (every rank sees it in the same step: it rides on the
step's all-reduce), so the benchmark ends a run once it has what it measures.

Torch elastic restarts workers from scratch after a membership change, so the bare script
keeps its own checkpoint, ``DIR/state.json`` (written to a temporary file, fsynced, renamed);
under Shoal the state goes to ``shoal.ctx().checkpoint``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEP_SECONDS = 0.1
MAX_STEPS = 100_000  # a bound only: the benchmark stops every run with DIR/stop


def loop(out: Path, every: int, restart: int, state: dict[str, Any] | None,
         save: Callable[[dict[str, Any], int], None]) -> dict[str, int]:
    """Train from ``state`` (None: from scratch) until ``out/stop`` exists; the last step and
    world size."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    start = 0
    if state is not None:
        start = int(state["step"]) + 1
        model.load_state_dict({k: torch.tensor(v) for k, v in state["weights"].items()})
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 16, generator=g)
    y = x.sum(dim=1, keepdim=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    log = (out / f"steps-rank{rank}.txt").open("a")
    step = start
    for step in range(start, MAX_STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()
                          if p.grad is not None])
        flag = torch.tensor([1.0 if (out / "stop").exists() else 0.0])
        dist.all_reduce(flat)
        dist.all_reduce(flag)
        offset = 0
        for p in model.parameters():
            if p.grad is not None:
                n = p.grad.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p.grad) / world)
                offset += n
        opt.step()
        log.write(f"{time.time():.4f} {restart} {step} {world}\n")
        log.flush()
        if step % every == every - 1:
            if rank == 0:
                save({"step": step, "weights": {k: v.tolist()
                                                for k, v in model.state_dict().items()}}, step)
            dist.barrier()
        if flag.item() > 0:
            break
        time.sleep(STEP_SECONDS)
    log.close()
    dist.destroy_process_group()
    return {"step": step, "world": world}


def _save_file(path: Path) -> Callable[[dict[str, Any], int], None]:
    def save(state: dict[str, Any], step: int) -> None:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return save


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--every", type=int, default=5)
    args = ap.parse_args()
    ckpt = args.out / "state.json"
    loaded = json.loads(ckpt.read_text()) if ckpt.exists() else None
    loop(args.out, args.every, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
         loaded, _save_file(ckpt))
