"""One DeepSpeed body, unchanged, under a Shoal gang and under bare ``torchrun``.

``train`` runs ZeRO stages 1, 2 and 3 one after the other in the same processes, each on a
freshly seeded tiny model, with DeepSpeed's own checkpoints made durable by
`DeepSpeedCheckpoint` every ``SAVE_EVERY`` steps. Data for (step, rank) comes from a generator
seeded by both, so a run that resumes from a checkpoint takes the steps an uninterrupted one
took: with two ranks every reduction sums two numbers (exact in any order), so the losses of a
resumed stage equal the uninterrupted ones bit for bit.

Under Shoal (``shoal.ctx()`` is set) the first start's rank 1 is killed (SIGKILL) in the save of
step ``DIE_AT`` of ZeRO-1, after DeepSpeed wrote its files and before its shard was uploaded:
that version never commits, so the gang restarts and ZeRO-1 resumes from step 2, whose files
only the store has on the other node's disk (each node has its own local folder). After ZeRO-2
and ZeRO-3, a second engine restores the last save into an empty folder (as a retry on other
nodes would) and must compute the next step's loss as the trained one does.

Under torchrun (``python -m torch.distributed.run ... THIS OUT``) nothing dies and the
checkpoint is a `shoal.Checkpoint` under OUT, one local folder per rank.

Must not import torch or deepspeed at its top: a test process imports it to submit the task.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, DeepSpeedCheckpoint

STEPS = 6
SAVE_EVERY = 2
DIE_AT = 4  # the first start's rank 1 is killed in this step's save of ZeRO-1 (Shoal only)
COLLECTIVE_TIMEOUT = 45

env = ClusteredTaskEnvironment(
    # GPUs this machine does not have: emulated on CPU, so DeepSpeed must take its CPU path.
    name="deepspeed-zero", resources=shoal.Resources(cpu=1, memory="2Gi", gpu="A100 80G:1"),
    replicas=2, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=COLLECTIVE_TIMEOUT,
                                        grace_period=2),
)


def _config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        # torch's Adam: DeepSpeed's fused and CPU Adams are C++ ops it compiles on first use.
        "optimizer": {"type": "Adam", "params": {"lr": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
    }


def _engine(stage: int) -> Any:
    import deepspeed
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=_config(stage))
    return engine


def _step(engine: Any, step: int) -> float:
    """One training step on this rank's batch of ``step``; the loss averaged over the world."""
    import torch
    import torch.distributed as dist

    g = torch.Generator().manual_seed(1000 * step + engine.global_rank)
    x = torch.randn(4, 8, generator=g)
    loss = torch.nn.functional.mse_loss(engine(x), x.sum(1, keepdim=True))
    engine.backward(loss)
    engine.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return mean.item() / dist.get_world_size()


def _checks(engine: Any, cp: shoal.Checkpoint, shared: Path) -> dict[str, str]:
    """The refusals, from a real engine: the error each raises, by name."""
    import torch.distributed as dist

    from shoal.errors import NotFoundError, SpecError

    seen: dict[str, str] = {}
    try:
        DeepSpeedCheckpoint((engine, None, None, None), checkpoint=cp)
    except SpecError as e:
        seen["tuple"] = str(e)
    try:
        DeepSpeedCheckpoint(engine, checkpoint=cp).save_sync("never-saved", step=999)
    except NotFoundError as e:
        seen["missing"] = str(e)
    both = None
    try:  # both ranks name one folder: whichever comes second, or its save, says so
        both = DeepSpeedCheckpoint(engine, shared, checkpoint=cp)
    except SpecError as e:
        seen["shared"] = str(e)
    dist.barrier()
    if both is not None:
        try:
            both.save_sync("never-saved", step=999)
        except SpecError as e:
            seen["shared"] = str(e)
    return seen


def body(cp: shoal.Checkpoint, out: Path, die: bool) -> dict[str, Any]:
    """The training, the same under Shoal and torchrun; what rank 0 returns."""
    import torch.distributed as dist

    result: dict[str, Any] = {"losses": {}, "resumed": None, "replayed": {}}
    for stage in (1, 2, 3):
        engine = _engine(stage)
        if stage == 1:
            result["checks"] = _checks(engine, cp, out / "shared")
            result["env"] = {k: os.environ.get(k) for k in (
                "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_SIZE",
                "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR")}
            import deepspeed
            from torch.distributed.distributed_c10d import _get_default_group

            result["accelerator"] = deepspeed.get_accelerator().device_name()
            result["backend"] = dist.get_backend()
            result["timeout_s"] = _pg_timeout(_get_default_group())
        ds_ckpt = DeepSpeedCheckpoint(engine, checkpoint=cp)
        first = 1
        if stage == 1 and (tag := ds_ckpt.restore_sync()) is not None:
            _, client = engine.load_checkpoint(ds_ckpt.dir)
            result["resumed"] = {"tag": tag, "step": client["step"],
                                 "global_steps": engine.global_steps}
            first = client["step"] + 1
        losses: dict[str, float] = {}  # by step (a task's untyped dict has text keys)
        for step in range(first, STEPS + 1):
            losses[str(step)] = loss = _step(engine, step)
            if engine.global_rank == 0:  # what this start did, even if it dies
                log = out / f"losses-r{_restart()}.json"
                log.write_text(json.dumps({**_read(log), f"{stage}:{step}": loss}))
            if step % SAVE_EVERY == 0:
                tag = f"zero{stage}-step{step}"
                engine.save_checkpoint(ds_ckpt.dir, tag=tag, client_state={"step": step})
                if die and stage == 1 and step == DIE_AT and engine.global_rank == 1:
                    os.kill(os.getpid(), signal.SIGKILL)  # its files on its disk, not uploaded
                ds_ckpt.save_sync(tag, step=100 * stage + step)
        result["losses"][str(stage)] = losses
        if stage > 1:
            # A second engine on an empty disk (as a retry or a resumed run on other nodes),
            # restored from the last save, takes the next step as the trained one does.
            again = _engine(stage)
            elsewhere = shoal.Checkpoint(cp.uri, local_dir=out / f"elsewhere{stage}-{cp.rank}",
                                         rank=cp.rank, world_size=cp.world_size)
            restored = DeepSpeedCheckpoint(again, checkpoint=elsewhere)
            tag = restored.restore_sync()
            again.load_checkpoint(restored.dir)
            result["replayed"][str(stage)] = {"tag": tag, "restored": _step(again, STEPS + 1),
                                         "trained": _step(engine, STEPS + 1)}
    result["steps"] = cp.steps()
    return result


def _pg_timeout(group: Any) -> float:
    import torch

    backend = group._get_backend(torch.device("cpu"))
    return float(backend.options._timeout.total_seconds())


def _restart() -> int:
    return shoal.ctx().restart_attempt or 0


def _read(path: Path) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


@env.task
def train(out_dir: str) -> dict[str, Any]:
    return body(shoal.ctx().checkpoint, Path(out_dir), die=_restart() == 0)


if __name__ == "__main__":  # under torchrun: python -m torch.distributed.run ... THIS OUT
    out = Path(sys.argv[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cp = shoal.Checkpoint((out / "store").resolve().as_uri(), local_dir=out / f"local{rank}",
                          rank=rank, world_size=world)
    result = body(cp, out, die=False)
    cp.close()
    if rank == 0:
        (out / "torchrun.json").write_text(json.dumps(result))
