"""Tasks that log metrics, for the system-metric and bridge tests: a plain call and a gang of
two ranks on one node, each busy on the CPU for about ``seconds`` and holding some memory."""

from __future__ import annotations

import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, TorchRun

plain_env = shoal.TaskEnvironment(name="metrics_plain")
gang_env = ClusteredTaskEnvironment(
    name="metrics_gang", replicas=1, nproc_per_node=2,
    resources=shoal.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
)


def _work(steps: int, seconds: float, rank: int) -> float:
    ballast = bytearray(32 << 20)  # 32 MiB touched, so the rank's RSS is clearly above it
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    loss = 0.0
    end = time.monotonic() + seconds
    for step in range(steps):
        loss = 1.0 / (step + 1) + rank
        shoal.log_metrics({"loss": loss, "lr": 0.1}, step=step)
        while time.monotonic() < end - seconds * (steps - step - 1) / steps:
            sum(range(1000))  # busy: CPU % above zero
    return loss + len(ballast) * 0


@plain_env.task
def plain(steps: int = 5, seconds: float = 1.0) -> float:
    return _work(steps, seconds, 0)


@gang_env.task
def ranks(steps: int = 5, seconds: float = 1.5) -> float:
    return _work(steps, seconds, shoal.ctx().rank or 0)
