"""The node launcher's sampler: every rank's CPU, memory and GPUs, written per rank.

A daemon thread of the launcher. Every ``SHOAL_SYSTEM_METRICS_INTERVAL`` seconds it finds the
node's ranks, samples each rank's process tree (`system_metrics`) and appends the points to that
rank's ``.system.jsonl`` file. It must never slow or fail training: the thread only reads
``/proc`` and NVML, a process that vanished mid-sample is skipped, and any unexpected error
turns the whole sampler off after one line in the node's log.

Ranks the launcher forks or starts itself are its children, known by pid. Under torchrun they
are torchrun's children (the launcher's grandchildren), found by walking the launcher's process
tree for the topmost processes whose environment holds ``LOCAL_RANK``: that finds them again
after torchrun restarts them in the node.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.node.torchrun_agent import local_rank_of
from shoal._runtime.observe import (
    Gpus,
    MetricsWriter,
    TreeSampler,
    gpu_points,
    open_writer,
    visible_device,
)

RankPids = Callable[[], dict[int, int]]  # local rank -> pid of its topmost process


class NodeSampler:
    def __init__(self, node: NodeEnv, rank_pids: RankPids, interval: float) -> None:
        self.node = node
        self.rank_pids = rank_pids
        self.interval = interval
        self._stop = threading.Event()
        self._writers: dict[int, MetricsWriter] = {}
        self._trees: dict[int, TreeSampler] = {}
        self._samples = 0
        self._previous = time.monotonic()  # when the last sample (or the start) was
        self._gpus: Gpus | None = None
        self._visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._thread = threading.Thread(target=self._loop, name="shoal-system-metrics",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The last samples on disk; bounded, as the launcher waits for it before it exits."""
        self._stop.set()
        self._thread.join(timeout=2.0)
        for writer in list(self._writers.values()):
            writer.close()

    def _loop(self) -> None:
        try:
            self._gpus = Gpus.open()
            while not self._stop.wait(self.interval):
                self.sample()
        except Exception as e:  # a sampler bug must never end training
            print(f"shoal-node {self.node.node_rank}: system metrics are off for this node: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            if self._gpus is not None:
                self._gpus.close()

    def sample(self) -> None:
        now = time.time()
        states = self._gpus.states() if self._gpus is not None else []
        for local_rank, pid in sorted(self.rank_pids().items()):
            tree = self._trees.get(local_rank)
            if tree is None:  # a rank first seen now started after the previous sample
                tree = self._trees[local_rank] = TreeSampler(since=self._previous)
            got = tree.sample(pid)
            if got is None:
                continue  # the rank has ended
            points, pids = got
            if states:
                points.update(gpu_points(states, pids,
                                         visible_device(local_rank, self._visible)))
            self._writer(local_rank).add(sorted(points.items()), self._samples, now)
        self._samples += 1
        self._previous = time.monotonic()

    def _writer(self, local_rank: int) -> MetricsWriter:
        writer = self._writers.get(local_rank)
        if writer is None:
            n = self.node
            writer = self._writers[local_rank] = open_writer(
                n.home, n.run, n.action, n.attempt, restart=n.restart_attempt,
                node=n.node_rank, rank=n.node_rank * n.nproc_per_node + local_rank,
                source="system")
        return writer


def torchrun_ranks() -> dict[int, int]:
    """The ranks torchrun started under this process: local rank -> pid. An exec'd rank has
    torchrun's LOCAL_RANK in its environ; a rank `torchrun_agent` forked says it in its name."""
    import psutil

    try:
        family = psutil.Process().children(recursive=True)
    except psutil.Error:
        return {}
    local: dict[int, int] = {}  # pid -> local rank, for processes that have one
    for proc in family:
        try:
            value = proc.environ().get(contract.TORCH_LOCAL_RANK)
            named = local_rank_of(proc.name())
        except psutil.Error:
            continue
        if value is not None and value.isdigit():
            local[proc.pid] = int(value)
        elif named is not None:
            local[proc.pid] = named
    out: dict[int, int] = {}
    for proc in family:
        if proc.pid not in local:
            continue
        try:
            parent = proc.ppid()
        except psutil.Error:
            continue
        if parent not in local:  # a data-loader worker inherits LOCAL_RANK from its rank
            out[local[proc.pid]] = proc.pid
    return out


def start_sampler(node: NodeEnv, rank_pids: RankPids) -> NodeSampler | None:
    """The node's sampler, started; None when sampling is off (or its interval is bad)."""
    try:
        interval = contract.system_metrics_interval()
    except ValueError as e:
        print(f"shoal-node {node.node_rank}: system metrics are off: "
              f"{contract.SYSTEM_METRICS_INTERVAL} {e}", file=sys.stderr, flush=True)
        return None
    if interval == 0:
        return None
    sampler = NodeSampler(node, rank_pids, interval)
    sampler.start()
    return sampler
