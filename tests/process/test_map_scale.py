"""A sync `shoal.map` of thousands of calls holds nothing per call: the processes, their open
files and the engine's Python heap are the same after the last round as after the first."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import pytest

from shoal._contract import SYSTEM_METRICS_INTERVAL
from shoal._driver.runner import Runner

from .programs import map_scale

pytestmark = pytest.mark.slow

N, ROUNDS = 500, 5  # 2,500 calls; the first round warms every cache and worker up


def _small_blocks() -> int:
    """The traced heap in blocks under 1 MiB. The interpreter's process-wide tables (the
    interned strings' dict, which every module that earlier tests in this process imported
    fills) grow by one block of megabytes when they cross a size, at a moment those tests
    decide (7.5 MiB at once in a full run); a call's leak is many small blocks, not one."""
    return sum(t.size for t in tracemalloc.take_snapshot().traces if t.size < 2**20)


def test_map_of_thousands_of_calls_does_not_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine samples a call that runs past 0.05 s (the driver task here) into its own
    # system-metrics file, opened at the sampler's first flush: a moment set by the clock, not
    # by the calls, which fell after the first round once a round took under a second.
    monkeypatch.setenv(SYSTEM_METRICS_INTERVAL, "0")
    heap: list[int] = []  # the engine's traced Python heap after each round's last call

    def reporter(kind: str, action: str, data: dict[str, Any]) -> None:
        if kind == "succeeded" and data["task"] == map_scale.inc.name:
            reporter.done += 1  # type: ignore[attr-defined]
            if reporter.done % N == 0:  # type: ignore[attr-defined]
                heap.append(_small_blocks())

    reporter.done = 0  # type: ignore[attr-defined]
    call = map_scale.map_rounds.make_call((N, ROUNDS, 32), {}, parent_action=None)
    envs = [e.spec() for e in map_scale.scale_driver.reachable().values()]
    runner = Runner(call, envs=envs, reporter=reporter)
    gc.collect()
    tracemalloc.start()
    try:
        outcome = asyncio.run(runner.run())
    finally:
        tracemalloc.stop()
    assert outcome.error is None, outcome.error
    rounds = map_scale.map_rounds.decode_output(outcome.output)
    first, last = rounds[0], rounds[-1]
    assert last["workers"] == first["workers"] >= 1
    for key in ("driver_fds", "engine_fds", "workers_fds"):
        # <=: the engine is this test process, where earlier tests' garbage may close fds
        assert last[key] <= first[key], (key, [r[key] for r in rounds])
    # A leak of one small object a call shows here: 64 bytes x 2,000 calls = 125 KiB.
    assert heap[-1] - heap[0] < 64 * 1024, [h - heap[0] for h in heap]
    # RSS also counts SQLite's page cache of the records (up to 2 MiB a connection), which
    # fills as the run's rows do: bounded, not per call.
    for key in ("driver_rss", "engine_rss"):
        assert last[key] - first[key] < 4 * 2**20, (key, [r[key] for r in rounds])
