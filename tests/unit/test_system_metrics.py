"""System metrics: a real process tree sampled with psutil; GPU attribution by value (NVML's
answers as data, since this machine has no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from shoal._runtime.observe.system_metrics import (
    CPU,
    GPU_MEMORY,
    GPU_UTIL,
    PSS,
    RSS,
    Gpus,
    GpuState,
    TreeSampler,
    gpu_points,
    visible_device,
)
from tests.helpers import wait_until


def test_a_busy_child_counts_in_its_parents_cpu_and_memory() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nend = time.monotonic() + 3\n"
                              "while time.monotonic() < end: pass"])
    import psutil

    spinner = psutil.Process(child.pid)
    try:
        sampler = TreeSampler()
        sampler.prime(os.getpid())
        before, start = sum(spinner.cpu_times()[:2]), time.monotonic()
        time.sleep(0.6)
        got = sampler.sample(os.getpid())
        spun = (sum(spinner.cpu_times()[:2]) - before) / (time.monotonic() - start) * 100
        assert got is not None
        points, pids = got
        assert {os.getpid(), child.pid} <= pids
        # The child spins one core; a loaded machine gives it less, so the tree's figure is
        # held to what the child was really given over the same window (psutil's own count).
        assert spun > 1 and points[CPU] >= 0.8 * spun, (points[CPU], spun)
        assert points[RSS] > 10 * 2**20
        assert PSS not in points or 0 < points[PSS] <= points[RSS]
    finally:
        child.kill()
        child.wait()


def test_a_vanished_process_gives_no_sample() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert TreeSampler().sample(child.pid) is None


def test_an_ended_process_not_yet_reaped_gives_no_sample() -> None:
    # A rank that exited before its launcher reaped it is a zombie: psutil reads its memory
    # as 0 bytes, which must not become an RSS point of 0.
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_until("the child to be a zombie",
                   lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE,
                   timeout=10, every=0.01)
        assert TreeSampler().sample(child.pid) is None
        got = TreeSampler().sample(os.getpid())  # a zombie child is left out of its parent's
        assert got is not None and child.pid not in got[1]
    finally:
        child.wait()


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


class FakeNvml(types.ModuleType):
    """pynvml's calls as this module uses them, answering for two GPUs (this machine has none;
    NVML is the one part faked). Process 4242 runs on GPU 1."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=[10, 80][h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=[1 << 30, 2 << 30][h])

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h}".encode()

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        if h == 0:
            raise self.NVMLError("Not Supported")
        return [types.SimpleNamespace(pid=4242, usedGpuMemory=None)]


def test_nvml_answers_become_gpu_states(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    gpus = Gpus.open()
    assert gpus is not None
    states = gpus.states()
    assert [(s.index, s.uuid, s.util_percent, s.process_memory) for s in states] == [
        (0, "GPU-0", 10.0, {}), (1, "GPU-1", 80.0, {4242: 0})]
    # NVML does not know the process's memory (None): the GPU's memory in use stands for it.
    assert gpu_points(states, {4242}, "0") == {GPU_UTIL: 80.0, GPU_MEMORY: float(2 << 30)}
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    assert Gpus.open() is None  # no driver: CPU and memory only, silently


def test_the_node_sampler_writes_each_ranks_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._contract import NodeEnv
    from shoal._runtime.node.node_sampler import NodeSampler
    from shoal._storage.metrics import RunMetrics

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    node = NodeEnv(home=str(tmp_path), store="", run="r", action="a3", attempt=1,
                   env_name="e", code_file="", task="t", io="", node_rank=1, nnodes=2,
                   nproc_per_node=2, master_addr="", master_port=0, restart_attempt=2)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        sampler = NodeSampler(node, lambda: {0: os.getpid(), 1: child.pid}, interval=0.1)
        sampler.start()
        wait_until("two samples of the node", lambda: sampler._samples >= 2, timeout=30)
        sampler.stop()
    finally:
        child.kill()
        child.wait()
    metrics = RunMetrics(tmp_path, "r")
    metrics.refresh()
    rss = {s.rank: s for s in metrics.series(name=RSS)}
    assert sorted(rss) == [2, 3]  # node 1's local ranks 0 and 1
    assert all(s.source == "system" and s.restart == 2 and s.node == 1 for s in rss.values())
    assert len(rss[2].values) >= 2 and rss[2].steps[0] == 0
    # Local rank 0 uses CUDA_VISIBLE_DEVICES[0] = GPU 1; local rank 1 uses GPU 0.
    util = {s.rank: max(s.values) for s in metrics.series(name=GPU_UTIL)}
    assert util == {2: 80.0, 3: 10.0}
    assert (tmp_path / "runs/r/metrics/a3.1/r2.rank3.system.jsonl").is_file()


def test_a_process_in_its_exit_with_no_memory_left_gives_no_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Between letting its memory go and becoming a zombie, an exiting process still reads as
    # running, with 0 bytes resident (psutil's answer, given here as data).
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import functools

        real = psutil.Process.memory_info

        @functools.wraps(real)  # with psutil's oneshot cache hooks
        def memory_info(self: psutil.Process) -> Any:
            got = real(self)
            return got._replace(rss=0) if self.pid == child.pid else got

        monkeypatch.setattr(psutil.Process, "memory_info", memory_info)
        assert TreeSampler().sample(child.pid) is None
        got = TreeSampler().sample(os.getpid())
        assert got is not None and child.pid not in got[1]
    finally:
        child.kill()
        child.wait()
