"""Elastic gangs (1 to 2 nodes × 1 rank) that train from a durable checkpoint.

Every start writes what it saw (world, cause, step it resumed from) and every step what it
trained, and on which samples, so the tests can follow the gang through a lost node, a lent
node and growth back. The samples come from an `ElasticSampler` (a global batch of 2, one
epoch of ``2 × steps`` samples); rank 0 commits the state (step, sampler position, the sum of
world sizes seen) every ``EVERY`` steps.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, ElasticSampler

EVERY = 3  # steps between checkpoint commits
BATCH = 2  # the global batch: one sample a rank at 2 nodes, two at 1
STEP_SECONDS = 0.15
RES = shoal.Resources(cpu=1, memory="512Mi")


def _policy(max_restarts: int) -> ClusterFailurePolicy:
    return ClusterFailurePolicy(max_restarts=max_restarts, collective_timeout=30,
                                grace_period=2, monitor_interval=2)


elastic_env = ClusteredTaskEnvironment(
    name="elastic", resources=RES, replicas=2, min_replicas=1, nproc_per_node=1,
    failure_policy=_policy(1))
lender_env = ClusteredTaskEnvironment(
    name="lender", resources=RES, replicas=2, min_replicas=1, nproc_per_node=1,
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/priority-class": "batch"}),
    failure_policy=_policy(0))
urgent_env = shoal.TaskEnvironment(
    name="urgent", resources=RES,
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/priority-class": "urgent"}))
boss_env = shoal.TaskEnvironment(name="boss", resources=shoal.Resources(cpu=1),
                                 depends_on=[lender_env, urgent_env])


def _train(out_dir: str, steps: int) -> dict[str, int | str]:
    import torch
    import torch.distributed as dist

    ctx = shoal.ctx()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cp = ctx.checkpoint
    raw = cp.load_sync()
    state = json.loads(raw) if isinstance(raw, bytes) else {"step": -1, "worlds": 0}
    start = int(state["step"]) + 1
    sampler = ElasticSampler(BATCH * steps, batch_size=BATCH, seed=7)
    if "sampler" in state:
        sampler.load_state_dict(state["sampler"])
    batches = iter(sampler.batches())
    out = Path(out_dir)
    (out / f"start-r{ctx.restart_attempt}-rank{rank}.json").write_text(json.dumps({
        "world": world, "cause": ctx.start_cause, "nnodes": ctx.nnodes, "start": start,
        "node": ctx.node_rank, "min": ctx.min_nnodes, "max": ctx.max_nnodes,
        "pid": os.getpid()}))
    t = torch.zeros(1)
    for done, step in enumerate(range(start, steps), 1):
        batch = next(batches)
        t.fill_(1.0)
        dist.all_reduce(t)  # every rank of this start agrees on its world
        assert int(t.item()) == world, (t.item(), world)
        state["step"], state["worlds"] = step, int(state["worlds"]) + world
        state["sampler"] = sampler.state_dict(batches_done=done)
        with (out / f"steps-rank{rank}.txt").open("a") as f:
            f.write(f"{ctx.restart_attempt} {step} {world} {','.join(map(str, batch))}\n")
        if step % EVERY == EVERY - 1:
            if rank == 0:
                cp.save_sync(json.dumps(state).encode(), step=step)
            dist.barrier()
        time.sleep(STEP_SECONDS)
    dist.destroy_process_group()
    return {"world": world, "restart": int(ctx.restart_attempt or 0),
            "cause": ctx.start_cause, "worlds": int(state["worlds"])}


@elastic_env.task
def train(out_dir: str, steps: int) -> dict[str, int | str]:
    """The test kills a node's whole tree mid-run; the gang trains on and grows back."""
    return _train(out_dir, steps)


@lender_env.task
def lends(out_dir: str, steps: int) -> dict[str, int | str]:
    return _train(out_dir, steps)


@urgent_env.task
def urgent(out_dir: str) -> float:
    """Takes one node's worth from the lender while it runs."""
    Path(out_dir, "urgent").write_text(str(time.time()))
    time.sleep(3)
    return time.time()


@boss_env.task
async def lend_and_grow_back(out_dir: str, steps: int) -> dict[str, int | str]:
    """The lender runs at 2 nodes; an urgent call needs one node's worth: the lender lends
    one, trains on at 1, and grows back once the urgent call is done."""
    low = asyncio.ensure_future(lends.aio(out_dir, steps))
    out = Path(out_dir)
    while not (out / "steps-rank1.txt").exists():
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    ended = await urgent.aio(out_dir)
    Path(out_dir, "urgent-ended").write_text(str(ended))
    return await low
