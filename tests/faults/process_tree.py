"""Watching the process tree of one `shoal run` from outside, as an operator would with `ps`:
every process it ever had (pid and start time, so a reused pid is not mistaken for it), what
each one is (engine, worker of which environment, node launcher, rank), and whether any of
them outlived the run."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import psutil

from shoal import _contract as contract
from tests.helpers import wait_until


@dataclass(frozen=True)
class Seen:
    pid: int
    started: float
    kind: str  # "engine" | "worker:<env>" | "launcher" | "rank" | "other"


def _kind(proc: psutil.Process, root: int) -> str:
    if proc.pid == root:
        return "engine"
    cmd = " ".join(proc.cmdline())
    if "shoal._runtime.worker" in cmd:
        return f"worker:{proc.environ().get(contract.ENV_NAME, '?')}"
    if "shoal._runtime.node.launcher" in cmd:
        # `unshare --kill-child python -m ...launcher`: the python process is the launcher.
        return "other" if proc.name() == "unshare" else "launcher"
    if "shoal._runtime.node.rank" in cmd:
        return "rank"
    return "other"


def _alive(seen: Seen) -> bool:
    try:
        proc = psutil.Process(seen.pid)
        return (abs(proc.create_time() - seen.started) < 1.0
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:  # gone, or gone while we looked
        return False


class TreeWatch:
    """Polls the tree under ``root`` every 20 ms in a thread until ``stop()``."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, float], Seen] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            time.sleep(0.02)

    def poll(self) -> None:
        try:
            top = psutil.Process(self.root)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                seen = Seen(proc.pid, proc.create_time(), _kind(proc, self.root))
            except psutil.Error:
                continue
            with self._lock:
                # A process caught between fork and exec still shows its parent's command
                # line: it is named again once it shows its own.
                known = self.seen.get((seen.pid, seen.started))
                if known is None or known.kind == "other":
                    self.seen[(seen.pid, seen.started)] = seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def living(self, kind: str) -> list[Seen]:
        with self._lock:
            found = [s for s in self.seen.values() if s.kind == kind]
        return [s for s in found if _alive(s)]

    def wait_all_gone(self, timeout: float) -> list[Seen]:
        """The processes of the tree still alive after ``timeout`` seconds (none: [])."""
        with contextlib.suppress(AssertionError):  # what is left is the answer, not an error
            wait_until("the tree to end", lambda: not self._left(), timeout=timeout, every=0.02)
        return self._left()

    def _left(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen.values() if _alive(s)]
