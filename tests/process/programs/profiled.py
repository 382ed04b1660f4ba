"""Small gloo workloads of 2 ranks, each bound by one thing, for `shoal profile` to classify:
data (a slow Dataset behind a DataLoader, or a sleep in ``shoal.profile_region("data")``),
communication (a large all_reduce, tiny compute), compute (large matmuls, a tiny all_reduce),
a straggler (rank 1 sleeps each step), and one that reports no steps (a time window)."""

from __future__ import annotations

import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

gang = ClusteredTaskEnvironment(
    name="profiled", replicas=1, nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(collective_timeout=60, grace_period=2),
    profile=shoal.Profile(steps=(2, 4)),
)
plain = shoal.TaskEnvironment(name="profiled_plain")


def _setup() -> tuple[object, object]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    return torch, dist


class SlowDataset:
    """Every item takes 20 ms to "read"."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> object:
        import torch

        time.sleep(0.02)
        return torch.ones(4)


@gang.task
def data_bound(steps: int = 6) -> int:
    torch, dist = _setup()
    from torch.utils.data import DataLoader

    loader = iter(DataLoader(SlowDataset(), batch_size=4))  # type: ignore[arg-type]
    x = torch.ones(16)  # type: ignore[attr-defined]
    for step in range(steps):
        batch = next(loader)
        with shoal.profile_region("data"):
            time.sleep(0.02)  # a tokenizer, say
        y = batch.sum() + x.sum()
        dist.all_reduce(x)  # type: ignore[attr-defined]
        shoal.log_metrics({"loss": float(y)}, step=step)
    dist.destroy_process_group()  # type: ignore[attr-defined]
    return steps


@gang.task
def communication_bound(steps: int = 6) -> int:
    torch, dist = _setup()
    big = torch.ones(8_000_000)  # type: ignore[attr-defined]
    for step in range(steps):
        small = torch.ones(8, 8) @ torch.ones(8, 8)  # type: ignore[attr-defined]
        dist.all_reduce(big)  # type: ignore[attr-defined]
        shoal.log_metrics({"loss": float(small[0, 0])}, step=step)
    dist.destroy_process_group()  # type: ignore[attr-defined]
    return steps


@gang.task
def compute_bound(steps: int = 6) -> int:
    torch, dist = _setup()
    a = torch.randn(600, 600)  # type: ignore[attr-defined]
    tiny = torch.ones(4)  # type: ignore[attr-defined]
    for step in range(steps):
        for _ in range(4):
            a = torch.tanh(a @ a)  # type: ignore[attr-defined]
        dist.all_reduce(tiny)  # type: ignore[attr-defined]
        shoal.log_metrics({"loss": float(a[0, 0])}, step=step)
    dist.destroy_process_group()  # type: ignore[attr-defined]
    return steps


@gang.task
def straggler(steps: int = 6) -> int:
    torch, dist = _setup()
    rank = shoal.ctx().rank
    x = torch.ones(1000)  # type: ignore[attr-defined]
    for step in range(steps):
        if rank == 1:
            time.sleep(0.1)  # the slow rank: the others wait for it in all_reduce
        dist.all_reduce(x)  # type: ignore[attr-defined]
        shoal.log_metrics({"loss": 1.0}, step=step)
    dist.destroy_process_group()  # type: ignore[attr-defined]
    return steps


@gang.task
def no_steps(seconds: float = 2.5) -> int:
    """Reports no steps: profiled with ``--profile profiled:seconds=0.5-1.5``.

    Each rank works on its own clock first and joins the group only at the end: a peer slow
    to start (a loaded machine) must not hold the profiled rank in the rendezvous while its
    window is open.
    """
    import torch

    torch.set_num_threads(1)
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        torch.ones(100, 100) @ torch.ones(100, 100)
        n += 1
        time.sleep(0.002)  # a few hundred steps a second: a trace that exports in a moment
    _, dist = _setup()
    dist.barrier()  # type: ignore[attr-defined]
    dist.destroy_process_group()  # type: ignore[attr-defined]
    return n


@plain.task
def plain_steps(steps: int = 6) -> int:
    import torch

    for step in range(steps):
        torch.ones(200, 200) @ torch.ones(200, 200)
        shoal.log_metrics({"loss": 1.0}, step=step)
    return steps
