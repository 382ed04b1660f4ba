"""The metrics of one running call: `shoal.log_metrics` points, buffered and appended to a file.

The hot path (`MetricsWriter.add`) only appends a tuple to a list; a daemon thread swaps the
list out every `FLUSH_INTERVAL` and appends it to the call's metrics file as one JSON line, so
training never waits for the disk. The buffer is bounded (`MAX_BUFFERED` points): past it new
points are counted as dropped, and the count is written with the next flush, never silently
lost. A flush also happens when the call ends (`close`), before a rank's ``os._exit``.

One file per call and rank (layout in `metrics_path`), the first line of which says whose
points follow (run, action, attempt, restart, node, rank, host, pid, source); then one line per
flush: ``{"names": [names new in this line], "s": [[name_id, [steps], [times], [values]], ...],
"dropped": n}``, names numbered in the order they first appear in the file, NaN and infinities
as Python's json writes them. `shoal._storage.metrics` reads them back. A process killed by
SIGKILL or SIGTERM loses at most its last `FLUSH_INTERVAL` of points, and a half-written last
line is skipped by the reader. No SIGTERM handler flushes first: a Python handler runs only
when the main thread is back in the interpreter, so a rank blocked in a collective would no
longer die of SIGTERM at once, and every gang stop or restart would wait out its grace period.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shoal._storage.private import open_private

FORMAT = 1
FLUSH_INTERVAL = 0.5  # seconds: a new point is on disk (and in the UI) within about this
MAX_BUFFERED = 200_000  # points held between flushes before new ones are dropped (~20 MB)


def metrics_dir(home: str | Path, run: str) -> Path:
    return Path(home) / "runs" / run / "metrics"


def metrics_path(home: str | Path, run: str, action: str, attempt: int,
                 restart: int | None = None, rank: int | None = None,
                 source: str = "user") -> Path:
    """``runs/<run>/metrics/<action>.<attempt>/task.jsonl`` for a plain call,
    ``.../r<restart>.rank<N>.jsonl`` for a rank of a gang; ``.system.jsonl`` for the samples
    the engine takes of the same process (CPU, memory, GPUs)."""
    stem = "task" if rank is None else f"r{restart or 0}.rank{rank}"
    suffix = "" if source == "user" else f".{source}"
    # One Path made from one string: a warm worker makes one per call.
    return Path(f"{os.fspath(home)}/runs/{run}/metrics/{action}.{attempt}/{stem}{suffix}.jsonl")


@functools.cache
def _host() -> str:
    return socket.gethostname()


class MetricsWriter:
    """Buffers points of one call (one rank of it) and appends them to its file."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.identity = {"format": FORMAT, **identity}
        self._points: list[tuple[str, int, float, float]] = []
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # the thread's flush and close()'s never interleave
        self._names: dict[str, int] = {}
        self._dropped = 0
        self._auto_step = 0
        self._high: int | None = None  # the highest step reported so far
        self._fd: int | None = None
        self._stop = False
        self._wake = threading.Event()  # set to flush early: the buffer is filling, or close()
        self._error: str | None = None
        # Set only while a profiler watches this rank's steps (`shoal._runtime.observe.profiling`).
        self.on_step: Callable[[int], None] | None = None
        # Called on the flusher thread after each flush with the last step (a rank publishes
        # its status for hang diagnosis from here: never on the training thread).
        self.on_tick: Callable[[int | None], None] | None = None
        # Called with each flush's points (name, step, time, value), on the thread that
        # flushes: a plugin that mirrors the call's points elsewhere (the task's own W&B run,
        # `shoal._plugins.wandb`), never on the training thread but for the last flush.
        self.on_flush: Callable[[list[tuple[str, int, float, float]]], None] | None = None
        # Started by the first point (or `start`): most calls log nothing and should not
        # pay for a thread each (a warm worker runs thousands of calls).
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the flusher thread if it is not running (idempotent)."""
        with self._lock:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._flush_loop, name="shoal-metrics",
                                                daemon=True)
                self._thread.start()

    # --- the hot path -----------------------------------------------------------------------

    def add(self, points: list[tuple[str, float]], step: int | None, at: float) -> None:
        if step is None:
            step = self._auto_step
        self._auto_step = step + 1
        if self._high is None or step > self._high:
            # Only a step past every earlier one moves the profiler's window and the rank's
            # progress: a loop that reports the values of the last N steps at once (read
            # from the device once per interval) after marking each step must not go back.
            self._high = step
            if self.on_step is not None:
                self.on_step(step)
        with self._lock:
            if len(self._points) + len(points) > MAX_BUFFERED:
                self._dropped += len(points)
                return
            for name, value in points:
                self._points.append((name, step, at, value))
            if len(self._points) > MAX_BUFFERED // 4:
                self._wake.set()
        if self._thread is None:
            self.start()

    # --- the background side ----------------------------------------------------------------

    def _flush_loop(self) -> None:
        # The first flush at once: the thread starts with the first point, which then shows
        # without waiting an interval.
        while True:
            self.flush()
            if self.on_tick is not None:
                self.on_tick(self.last_step)
            if self._stop:
                return
            self._wake.wait(FLUSH_INTERVAL)
            self._wake.clear()

    @property
    def last_step(self) -> int | None:
        """The highest step reported so far (None before the first report)."""
        return self._high

    def flush(self) -> None:
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            points, self._points = self._points, []
            dropped, self._dropped = self._dropped, 0
        if not points and not dropped:
            return
        if points and self.on_flush is not None:
            self._mirror(points)
        new_names: list[str] = []
        columns: dict[int, tuple[list[int], list[float], list[float]]] = {}
        for name, step, at, value in points:
            ident = self._names.get(name)
            if ident is None:
                ident = self._names[name] = len(self._names)
                new_names.append(name)
            column = columns.get(ident)
            if column is None:
                column = columns[ident] = ([], [], [])
            column[0].append(step)
            column[1].append(round(at, 3))
            column[2].append(value)
        # Column-wise: a reader parses flat arrays of numbers several times faster than rows.
        line: dict[str, Any] = {"s": [[ident, *column] for ident, column in columns.items()]}
        if new_names:
            line["names"] = new_names
        if dropped:
            line["dropped"] = dropped
        try:
            self._write(json.dumps(line, separators=(",", ":")) + "\n")
        except OSError as e:  # a full or broken disk must not fail training: say so once
            if self._error is None:
                self._error = str(e)
                import sys

                print(f"shoal: metrics could not be written to {self.path}: {e}; "
                      "training goes on without them", file=sys.stderr)

    def _mirror(self, points: list[tuple[str, int, float, float]]) -> None:
        mirror = self.on_flush
        try:
            if mirror is not None:
                mirror(points)
        except Exception as e:  # a mirror that fails must not stop the points reaching disk
            self.on_flush = None
            import sys

            print(f"shoal: metrics are no longer mirrored from {self.path.name} "
                  f"({type(e).__name__}: {e}); they are still kept with the run",
                  file=sys.stderr)

    def _write(self, text: str) -> None:
        if self._fd is None:
            self._fd = open_private(self.path)
            if os.fstat(self._fd).st_size == 0:
                header = json.dumps(self.identity, separators=(",", ":")) + "\n"
                os.write(self._fd, header.encode())
        data = text.encode()
        while data:  # one os.write per flush: a reader sees whole lines but for the last
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        with self._lock:
            self._stop = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=5)
        # Two closers at once (a node's stop on SIGTERM beside its main loop's) close the file
        # once: the second waits for the first's flush, then finds nothing to close.
        with self._flushing:
            self._flush()
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def open_writer(home: str | Path, run: str, action: str, attempt: int, *,
                restart: int | None = None, node: int | None = None, rank: int | None = None,
                source: str = "user", started: float | None = None) -> MetricsWriter:
    """The writer of one call's (rank's) file: ``source="system"`` for the engine's samples of
    its processes, which go to the ``.system.jsonl`` file beside the user's. ``started``: when
    the call began (default: now)."""
    return MetricsWriter(
        metrics_path(home, run, action, attempt, restart, rank, source=source),
        {"run": run, "action": action, "attempt": attempt, "restart": restart,
         "node": node, "rank": rank, "host": _host(), "pid": os.getpid(),
         "source": source, "started": time.time() if started is None else started})


def claim_stream(metrics_file: Path, tool: str, detail: dict[str, Any]) -> None:
    """Say beside a call's (rank's) metrics file that ``tool`` records its points itself (the
    task's own W&B run), so the driver's bridge of that tool skips the stream (`claimed`)."""
    claim = metrics_file.with_name(f"{metrics_file.name.removesuffix('.jsonl')}.{tool}.json")
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(json.dumps(detail))


def claimed(home: str | Path, run: str, action: str, attempt: int, rank: int | None,
            tool: str) -> bool:
    """Whether a rank (None: the plain call) of ``action``'s ``attempt`` claimed its stream
    for ``tool`` (in any restart of its gang)."""
    folder = metrics_dir(home, run) / f"{action}.{attempt}"
    pattern = f"task.{tool}.json" if rank is None else f"r*.rank{rank}.{tool}.json"
    return any(folder.glob(pattern))


_current: metrics_scope | None = None


def current() -> MetricsWriter | None:
    """The running call's writer (made now if the call had not logged yet); None outside."""
    scope = _current
    return None if scope is None else scope.writer()


class metrics_scope:
    """Around a call's body: `shoal.log_metrics` points go to this call's (rank's) file.

    A process runs one call at a time (a warm worker, a rank), so the writer is process-wide:
    threads the task starts (data loaders, watchdogs) log to it too. Entered by `deferred`,
    the writer is made when the call first asks for it (`current`): a warm worker's call that
    logs nothing pays for no writer (its file's header still says when the call started).
    """

    def __init__(self, home: str, run: str, action: str, attempt: int, *,
                 restart: int | None = None, node: int | None = None,
                 rank: int | None = None) -> None:
        self._open = functools.partial(open_writer, home, run, action, attempt,
                                       restart=restart, node=node, rank=rank,
                                       started=time.time())
        self._writer: MetricsWriter | None = None
        self._making = threading.Lock()  # two threads of the task log at once: one writer

    def writer(self) -> MetricsWriter:
        with self._making:
            if self._writer is None:
                self._writer = self._open()
            return self._writer

    def __enter__(self) -> MetricsWriter:
        global _current
        _current = self
        return self.writer()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """The scope entered with its writer not made yet."""
        global _current
        _current = self
        try:
            yield
        finally:
            self.__exit__()

    def __exit__(self, *exc: object) -> None:
        global _current
        _current = None
        with self._making:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
