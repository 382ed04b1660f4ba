"""Gangs that hold the machine until told to end (two runs of them share one machine pool)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

pooled = ClusteredTaskEnvironment(
    name="pooled", resources=flyte.Resources(cpu=1, memory="64Mi"), replicas=2,
    nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=0, resume_after_preemption=True,
                                        collective_timeout=20, grace_period=2),
)

# The same gang at a higher priority (SHOAL_PRIORITY_CLASSES="urgent=100").
urgent = ClusteredTaskEnvironment(
    name="urgent", resources=flyte.Resources(cpu=1, memory="64Mi"), replicas=2,
    nproc_per_node=1,
    pod_template=flyte.PodTemplate(labels={"kueue.x-k8s.io/priority-class": "urgent"}),
    failure_policy=ClusterFailurePolicy(max_restarts=0, collective_timeout=20, grace_period=2),
)


@pooled.task
def hold(marker_dir: str, who: str) -> int:
    return _hold(marker_dir, who)


@urgent.task
def hold_urgent(marker_dir: str, who: str) -> int:
    return _hold(marker_dir, who)


def _hold(marker_dir: str, who: str) -> int:
    """Say this start began (``<who>-start<restart>-<rank>``), then hold until ``<who>-go``
    exists; a SIGTERM (preemption) ends this start. Returns the restart it finished in."""
    ctx = flyte.ctx()
    restart = int(ctx.restart_attempt or 0)
    Path(marker_dir, f"{who}-start{restart}-{ctx.rank}").write_text(str(time.time()))
    signal.signal(signal.SIGTERM, lambda *_: exit(143))
    deadline = time.monotonic() + 90
    while not Path(marker_dir, f"{who}-go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return restart


# GPUs the machine is said to have (SHOAL_MACHINE_CAPACITY="gpu=2"): each call gets its own.
one_gpu = flyte.TaskEnvironment(name="onegpu", resources=flyte.Resources(cpu=1, gpu=1))
gpu_gang = ClusteredTaskEnvironment(
    name="gpugang", resources=flyte.Resources(cpu=1, gpu=1), replicas=2, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=0, collective_timeout=20),
)
gpu_driver = flyte.TaskEnvironment(name="gpudriver", depends_on=[one_gpu, gpu_gang])


@one_gpu.task
def visible(hold: float) -> str:
    time.sleep(hold)  # both calls hold their GPU at once
    return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


@gpu_gang.task
def gang_visible(marker_dir: str) -> str:
    seen = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    Path(marker_dir, f"rank{flyte.ctx().rank}").write_text(seen)
    return seen


@gpu_driver.task
def who_sees_what(marker_dir: str) -> list[str]:
    calls = list(flyte.map(visible, [1.0, 1.0]))
    return [*calls, gang_visible(marker_dir)]
