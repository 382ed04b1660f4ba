"""One bridge in its own daemon thread, fed the run's new metric points about every second.

The thread follows the run's metric files with `RunMetrics.refresh` (incremental) and hands
each bridge the points it has not seen, grouped per stream (one rank, or a plain call, of one
attempt of one action). Nothing here runs in a training process and nothing a bridge does can
reach one: an exception switches the bridge off (one warning line on stderr), and `stop`
waits for the last drain and close at most its ``timeout``, then abandons a bridge that hangs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shoal._storage.metrics import RunMetrics

POLL_SECONDS = 1.0
Point = tuple[str, int, float, float]  # name, step, wall time, value


@dataclass(frozen=True)
class Stream:
    """Whose points: one rank (``rank``; None for a plain call) of one action's attempt."""

    action: str
    attempt: int
    rank: int | None

    @property
    def folder(self) -> str:
        """``<action>.<attempt>/rank<N>`` (a plain call: ``<action>.<attempt>/task``)."""
        who = "task" if self.rank is None else f"rank{self.rank}"
        return f"{self.action}.{self.attempt}/{who}"


class Bridge:
    """What a bridge implements. `open` may be slow (it runs in the bridge's thread)."""

    name = "bridge"

    def open(self) -> None:
        """Set up (import the package, start a service); called once, in the thread."""

    def write(self, stream: Stream, points: Sequence[Point]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Make what was written visible (called after each round of writes)."""

    def close(self) -> None:
        """The last points are out; release everything."""


class BridgeThread:
    def __init__(self, bridge: Bridge, home: Path, run: str,
                 poll: float = POLL_SECONDS) -> None:
        self.bridge = bridge
        self.run = run
        self.poll = poll
        self.metrics = RunMetrics(home, run)
        self.failed: str | None = None  # why the bridge was switched off
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"shoal-{bridge.name}-bridge",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float, bound: float | None = None) -> bool:
        """A last drain and close, waited for at most ``timeout`` s; False if abandoned.
        ``bound``: the whole final drain's limit, as the warning states it."""
        self._stop.set()
        if self._done.wait(timeout):
            return True
        if self.failed is None:
            self._warn(f"did not finish within {bound or timeout:g}s; abandoned (its last "
                       "points may be missing)")
        return False

    def _loop(self) -> None:
        try:
            self.bridge.open()
            while not self._stop.wait(self.poll):
                self.forward()
            self.forward()  # the drain: what the run's last flushes wrote
            self.bridge.close()
        except Exception as e:  # any failure of a bridge ends the bridge, never the run
            self.failed = f"{type(e).__name__}: {e}"
            self._warn(f"failed ({self.failed}); switched off, the run goes on")
            with contextlib.suppress(Exception):  # what it holds, released if it can be
                self.bridge.close()
        finally:
            self._done.set()

    def forward(self) -> int:
        """Hand the bridge the points that arrived since the last call; how many."""
        self.metrics.refresh()
        batches: dict[Stream, list[Point]] = {}
        for s in self.metrics.drain():  # handed on, not kept: memory of one poll, not a run
            batch = batches.setdefault(Stream(s.action, s.attempt, s.rank), [])
            batch.extend(zip([s.name] * len(s.values), s.steps, s.times, s.values,
                             strict=True))
        for stream, points in batches.items():
            points.sort(key=lambda p: (p[1], p[2]))
            self.bridge.write(stream, points)
        if batches:
            self.bridge.flush()
        return sum(len(p) for p in batches.values())

    def _warn(self, what: str) -> None:
        print(f"shoal: warning: the {self.bridge.name} metrics bridge of run {self.run} {what}",
              file=sys.stderr, flush=True)


class Bridges:
    """The bridges of one run, started together and stopped within one shared bound."""

    def __init__(self, threads: list[BridgeThread]) -> None:
        self.threads = threads

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.request_stop()  # every bridge drains at once, not one after the other
        for t in self.threads:
            t.stop(max(0.0, deadline - time.monotonic()), bound=timeout)
