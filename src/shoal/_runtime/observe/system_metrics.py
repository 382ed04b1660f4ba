"""System metrics of a call's processes, taken by the engine with no user code: CPU, memory, GPUs.

Each sample of one rank (or plain call) covers its whole process tree (data-loader workers,
compiler subprocesses): ``system/cpu_percent`` (CPU time used since the previous sample over
the wall time between them; 100 = one core busy), ``system/rss_bytes`` (resident set, pages
shared between processes counted in each) and ``system/pss_bytes`` (proportional set, shared
pages split between their users: what the tree really holds; written where the kernel gives
it). Where NVML is importable (``pynvml``, from the ``nvidia-ml-py`` package) and GPUs exist,
``system/gpu_util_percent`` and ``system/gpu_memory_bytes`` of the GPUs the rank uses.

A rank's GPUs are those whose NVML process list holds one of the rank's processes (its memory:
what NVML says those processes hold). A container or PID namespace often hides those pids from
NVML; then the rank is given the GPU torch would give it, entry ``local_rank`` of
``CUDA_VISIBLE_DEVICES`` (or GPU ``local_rank`` when unset), and that GPU's memory in use.

The points go to the call's ``.system.jsonl`` file through a `MetricsWriter`; step = sample
index. psutil and pynvml are imported by whoever samples, never by ``import shoal``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shoal._runtime.observe.metrics import MetricsWriter

CPU = "system/cpu_percent"
RSS = "system/rss_bytes"
PSS = "system/pss_bytes"
GPU_UTIL = "system/gpu_util_percent"
GPU_MEMORY = "system/gpu_memory_bytes"


class TreeSampler:
    """CPU and memory of the process tree under one pid, one `sample` at a time."""

    def __init__(self, since: float | None = None) -> None:
        """``since``: the `time.monotonic` after which the tree's processes started (their
        CPU time so far is counted in the first sample); see `prime` for a running tree."""
        import psutil

        self._psutil = psutil
        self._cpu: dict[tuple[int, float], float] = {}  # (pid, start time) -> CPU seconds
        self._last = time.monotonic() if since is None else since

    def prime(self, root: int) -> None:
        """Take the tree's CPU time now as the base: the next sample covers only what follows."""
        self.sample(root)

    def sample(self, root: int) -> tuple[dict[str, float], set[int]] | None:
        """The tree's metrics and its pids; None once ``root`` has gone."""
        ps = self._psutil
        try:
            top = ps.Process(root)
            tree = [top, *top.children(recursive=True)]
        except ps.Error:
            return None
        now = time.monotonic()
        elapsed, self._last = max(now - self._last, 1e-3), now
        used = rss = pss = 0.0
        have_pss = True
        cpu: dict[tuple[int, float], float] = {}
        pids: set[int] = set()
        for proc in tree:
            try:
                with proc.oneshot():
                    resident = proc.memory_info().rss
                    # A zombie, or a process in its exit that has let its memory go already
                    # (its status still says running): it ended, and reads as 0 bytes.
                    if resident == 0:
                        continue
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    seconds = times.user + times.system
                    rss += resident
                    if have_pss:
                        try:
                            pss += proc.memory_full_info().pss
                        except (ps.AccessDenied, AttributeError):
                            have_pss = False
            except ps.Error:
                continue  # ended while being measured
            pids.add(proc.pid)
            cpu[key] = seconds
            # A process first seen now started after the previous sample (or is the first):
            # all its CPU time falls in this interval. A fork starts at 0 s of CPU.
            used += seconds - self._cpu.get(key, 0.0)
        if root not in pids:
            return None  # it ended (or was ending) while being measured
        self._cpu = cpu
        out = {CPU: round(max(used, 0.0) / elapsed * 100.0, 2), RSS: rss}
        if have_pss:
            out[PSS] = pss
        return out, pids


@dataclass(frozen=True)
class GpuState:
    index: int
    uuid: str
    util_percent: float
    memory_used: int
    process_memory: dict[int, int] = field(default_factory=dict)  # pid -> bytes (0: unknown)


class Gpus:
    """This machine's GPUs through NVML; `open` is None without NVML or without a GPU."""

    def __init__(self, nvml: Any, count: int) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    @classmethod
    def open(cls) -> Gpus | None:
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError:  # no driver, no device: CPU and memory only
            return None
        return cls(pynvml, count) if count else None

    def states(self) -> list[GpuState]:
        nvml = self._nvml
        out = []
        for index, handle in enumerate(self._handles):
            try:
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            except nvml.NVMLError:
                continue  # a GPU lost (Xid) or busy resetting: left out of this sample
            procs: dict[int, int] = {}
            try:
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    procs[int(p.pid)] = int(p.usedGpuMemory or 0)
            except nvml.NVMLError:
                pass  # no process list here: attribution falls back to the device index
            out.append(GpuState(index, uuid, util, used, procs))
        return out

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


def visible_device(local_rank: int | None, visible: str | None) -> str | None:
    """The GPU (an NVML index or a UUID) that rank ``local_rank`` uses by convention:
    ``cuda:<local_rank>``, i.e. that entry of ``CUDA_VISIBLE_DEVICES``."""
    if local_rank is None or local_rank < 0:
        return None
    if visible is None:
        return str(local_rank)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[local_rank] if local_rank < len(entries) else None


def gpu_points(states: Iterable[GpuState], pids: set[int],
               fallback: str | None) -> dict[str, float]:
    """``system/gpu_*`` of one rank: mean utilisation and total memory of its GPUs."""
    states = list(states)
    mine = [(s, sum(b for p, b in s.process_memory.items() if p in pids)) for s in states
            if pids & s.process_memory.keys()]
    if not mine and fallback is not None:
        mine = [(s, s.memory_used) for s in states
                if str(s.index) == fallback or s.uuid == fallback
                or (fallback.startswith("GPU-") and s.uuid.startswith(fallback))]
    if not mine:
        return {}
    return {GPU_UTIL: sum(s.util_percent for s, _ in mine) / len(mine),
            GPU_MEMORY: float(sum(b or s.memory_used for s, b in mine))}


class CallSampler:
    """The local engine's samples of one plain call: its worker's process tree, CPU and memory,
    every ``interval`` seconds into the call's ``task.system.jsonl``."""

    def __init__(self, writer: MetricsWriter, interval: float,
                 started: float | None = None) -> None:
        """``started``: the `time.monotonic` the call began (its first sample is due one
        ``interval`` after it); now when None."""
        self.writer = writer
        self.interval = interval
        self._tree = TreeSampler()
        self._next = (time.monotonic() if started is None else started) + interval
        self._samples = 0
        self._off = False

    def prime(self, pid: int) -> None:
        self._guarded(self._tree.prime, pid)

    def due(self) -> bool:
        return not self._off and time.monotonic() >= self._next

    def sample(self, pid: int) -> None:
        self._next = time.monotonic() + self.interval
        self._guarded(self._sample, pid)

    def _sample(self, pid: int) -> None:
        got = self._tree.sample(pid)
        if got is not None:
            self.writer.add(sorted(got[0].items()), self._samples, time.time())
            self._samples += 1

    def _guarded(self, step: Callable[[int], None], pid: int) -> None:
        try:
            step(pid)
        except Exception as e:  # a sampler bug must never fail the call
            self._off = True
            print(f"shoal: system metrics are off for {self.writer.path.parent.name}: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.writer.close()
