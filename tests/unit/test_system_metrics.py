"""System metrics: a real process tree sampled with psutil; GPU attribution by value (NVML's
answers as data, since this machine has no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from shoal._runtime.system_metrics import (
    CPU,
    GPU_MEMORY,
    GPU_UTIL,
    PSS,
    RSS,
    GpuState,
    TreeSampler,
    gpu_points,
    visible_device,
)


def test_a_busy_child_counts_in_its_parents_cpu_and_memory() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nend = time.monotonic() + 3\n"
                              "while time.monotonic() < end: pass"])
    try:
        sampler = TreeSampler()
        sampler.prime(os.getpid())
        time.sleep(0.6)
        got = sampler.sample(os.getpid())
        assert got is not None
        points, pids = got
        assert {os.getpid(), child.pid} <= pids
        assert points[CPU] > 30  # the child spins one core (a shared machine gives it less)
        assert points[RSS] > 10 * 2**20
        assert PSS not in points or 0 < points[PSS] <= points[RSS]
    finally:
        child.kill()
        child.wait()


def test_a_vanished_process_gives_no_sample() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert TreeSampler().sample(child.pid) is None


def _gpu(index: int, procs: dict[int, int], util: float = 50.0) -> GpuState:
    return GpuState(index, f"GPU-{index:04d}-abcd", util, (index + 1) * 1000, procs)


def test_gpus_are_attributed_by_the_processes_on_them() -> None:
    states = [_gpu(0, {10: 300}, util=90.0), _gpu(1, {20: 400, 21: 50}, util=30.0)]
    assert gpu_points(states, {20, 21, 99}, fallback="0") == {GPU_UTIL: 30.0, GPU_MEMORY: 450.0}
    # One rank on two GPUs: their mean utilisation, their memory summed.
    both = gpu_points(states, {10, 20}, fallback=None)
    assert both == {GPU_UTIL: 60.0, GPU_MEMORY: 700.0}


def test_without_visible_processes_the_rank_gets_its_visible_device() -> None:
    states = [_gpu(0, {}), _gpu(1, {}), _gpu(2, {})]  # a PID namespace hides the pids
    assert visible_device(1, None) == "1"
    assert visible_device(1, "2,0") == "0"
    assert visible_device(2, "2,0") is None
    assert visible_device(None, "0") is None
    assert gpu_points(states, {5}, visible_device(0, "2,0")) == {GPU_UTIL: 50.0,
                                                                   GPU_MEMORY: 3000.0}
    by_uuid = gpu_points(states, {5}, visible_device(0, "GPU-0001"))
    assert by_uuid[GPU_MEMORY] == 2000.0
    assert gpu_points(states, {5}, None) == {}
