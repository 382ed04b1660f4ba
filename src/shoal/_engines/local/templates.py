"""The engine's side of the worker template (`_runtime/worker_template.py`): one process per
engine that has imported Shoal's worker runtime and forks the run's workers.

Started with the run's first worker (a run that starts none starts no template), or taken over
from the process's previous run (`template_for`, `put_away`: kept idle between runs); a worker it
forks costs a fork and the user's imports instead of an interpreter start plus Shoal's imports
(benchmarks/dispatch.py: the second worker of a fan-out). A worker is forked only when
nothing a process reads as it starts differs from the template's (`STARTUP_PREFIXES`,
`STARTUP_VARIABLES`) and its command is the plain worker's; otherwise, or when the template
could not start or is gone, `procs.spawn` starts it afresh, as before.
``SHOAL_WORKER_TEMPLATE=0`` turns it off; ``SHOAL_KEEP_WORKER_TEMPLATE=0`` ends each with
its run.

A forked worker is the template's child, not the engine's: the template reaps it and reports
its exit (`Forked.wait`), and a worker dies with its template, whose EOF ends every wait the
engine still has on it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._engines.local import procs
from shoal._engines.local.plan import WORKER_ARGV
from shoal._storage.private import open_private

# Variables an interpreter (or the dynamic loader, or the C library) reads only as it starts:
# the interpreter's options and paths, the loader's, the locale (stdio's encoding), the time
# zone (`time` calls tzset at import), the home (the user site folder), the allocator. A worker
# whose values differ from the template's starts afresh.
STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_")
STARTUP_VARIABLES = ("LANG", "TZ", "HOME", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_CONF")
_KILLED = -9  # what a worker's wait says when its template is gone (it died with it)


def startup_part(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if k.startswith(STARTUP_PREFIXES) or k in STARTUP_VARIABLES}


class Forked:
    """A worker the template forked: what the engine uses of an asyncio process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.get_running_loop().create_future()

    def ended(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exited.set_result(code)

    async def wait(self) -> int:
        return int(await asyncio.shield(self._exited))


class WorkerTemplate:
    """One template process, and the workers it forked that have not ended.

    Made by `template_for`, handed back by `put_away`. It belongs to one run (one event loop)
    at a time: its replies are read by that loop (`add_reader` on the pipe's fd, which a
    parked template keeps open between runs).
    """

    def __init__(self, environ: Mapping[str, str], log_path: Path) -> None:
        self.environ = dict(environ)
        self.log_path = log_path
        self._startup = startup_part(self.environ)
        self._proc: subprocess.Popen[bytes] | None = None
        self._requests = -1  # the write end of its stdin
        self._replies = -1  # the read end of its stdout
        self._buffered = b""  # a reply's first part, until its newline
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Future[bool] | None = None
        self._asked: dict[str, asyncio.Future[Forked | None]] = {}
        self._forked: dict[int, Forked] = {}
        self.why = ""  # why it does not fork, once known
        self._gone_already = False

    def start(self) -> None:
        """Start it, without waiting: it imports in the background, and `fork` waits for it
        the first time. (A plain `Popen` with a pipe read by the loop, not an asyncio
        subprocess: nothing here is left half-done by a cancelled task, and the process can
        outlive the loop.)"""
        self._ready = asyncio.get_running_loop().create_future()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            with os.fdopen(open_private(self.log_path), "ab") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "shoal._runtime.worker_template"], stdin=req_r,
                    stdout=rep_w, stderr=log, env=self.environ, start_new_session=True)
        except OSError as e:
            os.close(req_w)
            os.close(rep_r)
            self._gone(f"could not start: {e}")
            return
        finally:
            os.close(req_r)  # its ends, which it holds now
            os.close(rep_w)
        self._requests, self._replies = req_w, rep_r
        os.set_blocking(req_w, False)
        os.set_blocking(rep_r, False)
        self._listen()

    def _listen(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._replies, self._readable)

    def can_fork(self, argv: tuple[str, ...], environ: Mapping[str, str]) -> bool:
        return (self._ready is not None and not self._gone_already and argv == WORKER_ARGV
                and startup_part(environ) == self._startup)

    async def fork(self, worker_id: str, environ: Mapping[str, str],
                   log_path: Path) -> Forked | None:
        """A worker forked with ``environ``, its output on ``log_path``; None when the
        template cannot (the caller starts one afresh)."""
        if self._ready is None or not await self._ready or self._gone_already:
            return None
        asked: asyncio.Future[Forked | None] = asyncio.get_running_loop().create_future()
        self._asked[worker_id] = asked
        os.close(open_private(log_path))  # made private (and its folder) before it appends
        line = json.dumps({"id": worker_id, "env": dict(environ), "cwd": os.getcwd(),
                           "log": str(log_path)}) + "\n"
        try:
            _write_all(self._requests, line.encode())
        except OSError as e:
            self._asked.pop(worker_id, None)
            self._gone(f"a request could not be written ({e})")
            return None
        return await asked

    def _readable(self) -> None:
        try:
            chunk = os.read(self._replies, 1 << 16)
        except BlockingIOError:
            return
        except OSError as e:
            chunk, self.why = b"", f"its replies could not be read ({e})"
        if not chunk:
            self._gone(self.why or "it exited")
            return
        self._buffered += chunk
        while b"\n" in self._buffered:
            line, self._buffered = self._buffered.split(b"\n", 1)
            try:
                self._heard(json.loads(line))
            except ValueError as e:
                self._gone(f"its replies could not be read ({e})")
                return

    def _heard(self, msg: dict[str, Any]) -> None:
        assert self._ready is not None
        if "ready" in msg:
            self.why = str(msg.get("why") or "")
            self._ready.set_result(bool(msg["ready"]))
        elif "exit" in msg:
            forked = self._forked.pop(int(msg["exit"]), None)
            if forked is not None:
                forked.ended(int(msg["code"]))
        elif "id" in msg:
            asked = self._asked.pop(str(msg["id"]), None)
            pid = msg.get("pid")
            # Made here: its exit may be reported before `fork` resumes.
            forked = Forked(pid) if isinstance(pid, int) else None
            if forked is not None:
                self._forked[forked.pid] = forked
            if asked is not None and not asked.done():
                asked.set_result(forked)

    def _gone(self, why: str) -> None:
        """It ended (or never started): no more forks; the workers it forked died with it."""
        self.why = self.why or why
        self._gone_already = True
        self._unlisten()
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        for asked in self._asked.values():
            if not asked.done():
                asked.set_result(None)
        self._asked.clear()
        for forked in self._forked.values():
            forked.ended(_KILLED)
        self._forked.clear()

    def _unlisten(self) -> None:
        if self._loop is not None and self._replies >= 0 and not self._loop.is_closed():
            self._loop.remove_reader(self._replies)
        self._loop = None

    def _running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _idle(self) -> bool:
        """Ready, alive, and with no worker or request outstanding: fit to be parked."""
        return (self._ready is not None and self._ready.done() and self._ready.result()
                and not self._gone_already and not self._forked and not self._asked
                and self._running())

    def _adopted(self, log_path: Path) -> None:
        """Taken out of the keeper by a run whose loop reads it from now on."""
        self.log_path = log_path
        self._ready = asyncio.get_running_loop().create_future()
        self._ready.set_result(True)
        self._listen()

    def _end_now(self, wait: bool = False) -> None:
        """EOF on its stdin, its signal to go (a parked template, which has no workers); reaped
        by a thread of its own, or here with ``wait``."""
        self._unlisten()
        for fd in (self._requests, self._replies):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._requests = self._replies = -1
        self._gone_already = True
        if self._proc is not None:
            if wait:
                _reap(self._proc)
            else:
                threading.Thread(target=_reap, args=(self._proc,), daemon=True,
                                 name="shoal-template-reaper").start()

    async def close(self) -> None:
        """End it (its workers were ended first, by the engine); EOF is its signal to go."""
        if self._requests >= 0:
            os.close(self._requests)
            self._requests = -1
        if self._proc is not None:
            deadline = time.monotonic() + 1.0
            while self._proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if self._proc.poll() is None:
                await procs.kill_tree(self._proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(1.0)
        self._gone("closed")
        if self._replies >= 0:
            os.close(self._replies)
            self._replies = -1


# -- one template kept by the process between its runs ----------------------------------------
# A program (a notebook, a test suite, a sweep) that calls `shoal.run` again and again would
# otherwise start a template, ~0.14 s of an interpreter start and Shoal's imports on 2 cores, for
# each run. A run's template that ends idle is parked here; the next run started with the same
# environment within KEEP_SECONDS adopts it. At most one is parked. It holds no thread of this
# process: it ends on EOF, when this process exits (or at `atexit`, waited for) or when another
# run's template replaces it.
KEEP_SECONDS = 600.0
_kept_lock = threading.Lock()
_kept: tuple[WorkerTemplate, float] | None = None  # and when it was parked (monotonic)


def template_for(environ: Mapping[str, str], log_path: Path) -> WorkerTemplate:
    """A template for a run whose workers inherit ``environ``: the one parked by an earlier run
    with the same, or a new one, started (call it from the run's loop)."""
    global _kept
    with _kept_lock:
        kept, _kept = _kept, None
    if kept is not None:
        template, parked_at = kept
        if template.environ == dict(environ) and time.monotonic() - parked_at < KEEP_SECONDS \
                and template._running():
            template._adopted(log_path)
            return template
        template._end_now()
    template = WorkerTemplate(environ, log_path)
    template.start()
    return template


async def put_away(template: WorkerTemplate) -> None:
    """At the end of its run: parked for the process's next run when it is idle (its workers
    were ended first, by the engine), else ended. It replaces one parked before."""
    global _kept
    if not contract.keep_worker_template() or not template._idle():
        await template.close()
        return
    template._unlisten()
    with _kept_lock:
        previous, _kept = _kept, (template, time.monotonic())
    if previous is not None:
        previous[0]._end_now()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a template told to go (EOF); killed when it does not within a second."""
    try:
        proc.wait(1.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1.0)


def end_kept() -> None:
    """The parked template goes, and is waited for (at the process's exit, or when a caller
    wants it reaped: `benchmarks/map_scale.py` reads its workers' peak memory then)."""
    global _kept
    with _kept_lock:
        kept, _kept = _kept, None
    if kept is not None:
        kept[0]._end_now(wait=True)


def _forget_kept_in_child() -> None:
    """In a child forked from this process: the parked template is its parent's (closing the
    child's copies of its pipes leaves the parent's open)."""
    global _kept, _kept_lock
    kept, _kept, _kept_lock = _kept, None, threading.Lock()
    if kept is not None:
        for fd in (kept[0]._requests, kept[0]._replies):
            with contextlib.suppress(OSError):
                os.close(fd)


atexit.register(end_kept)
os.register_at_fork(after_in_child=_forget_kept_in_child)


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to the non-blocking ``fd`` (a request is small: the pipe takes it)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            time.sleep(0.001)  # the template reads as fast as it forks
