"""The engine's side of the worker template (`_runtime/worker_template.py`): one process per
engine that has imported Shoal's worker runtime and forks the run's workers.

Started with the run's first worker (a run that starts none starts no template); a worker it
forks costs a fork and the user's imports instead of an interpreter start plus Shoal's imports
(benchmarks/dispatch.py: the second worker of a fan-out). A worker is forked only when
nothing a process reads as it starts differs from the template's (`STARTUP_PREFIXES`,
`STARTUP_VARIABLES`) and its command is the plain worker's; otherwise, or when the template
could not start or is gone, `procs.spawn` starts it afresh, as before.
``SHOAL_WORKER_TEMPLATE=0`` turns it off.

A forked worker is the template's child, not the engine's: the template reaps it and reports
its exit (`Forked.wait`), and a worker dies with its template, whose EOF ends every wait the
engine still has on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    """One run's template process, and the workers it forked that have not ended."""

    def __init__(self, environ: Mapping[str, str], log_path: Path) -> None:
        self.environ = dict(environ)
        self.log_path = log_path
        self._startup = startup_part(self.environ)
        self._proc: subprocess.Popen[bytes] | None = None
        self._requests = -1  # the write end of its stdin
        self._ready: asyncio.Future[bool] | None = None
        self._asked: dict[str, asyncio.Future[Forked | None]] = {}
        self._forked: dict[int, Forked] = {}
        self._reader: asyncio.Task[None] | None = None
        self._transport: asyncio.BaseTransport | None = None
        self.why = ""  # why it does not fork, once known
        self._gone_already = False

    def start(self) -> None:
        """Start it, without waiting: it imports in the background, and `fork` waits for it
        the first time. (A plain `Popen` with a pipe read by the loop, not an asyncio
        subprocess: nothing here is left half-done by a cancelled task.)"""
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
        self._requests = req_w
        os.set_blocking(req_w, False)
        self._reader = asyncio.ensure_future(self._read(os.fdopen(rep_r, "rb", buffering=0)))

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

    async def _read(self, pipe: Any) -> None:
        replies = asyncio.StreamReader()
        try:
            self._transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(replies), pipe)
            while line := await replies.readline():
                self._heard(json.loads(line))
        except (ValueError, OSError) as e:
            self.why = f"its replies could not be read ({e})"
        finally:
            if self._transport is None:
                pipe.close()
            self._gone(self.why or "it exited")

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
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        for asked in self._asked.values():
            if not asked.done():
                asked.set_result(None)
        self._asked.clear()
        for forked in self._forked.values():
            forked.ended(_KILLED)
        self._forked.clear()

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
        if self._transport is not None:
            self._transport.close()
        self._gone("closed")


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to the non-blocking ``fd`` (a request is small: the pipe takes it)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            time.sleep(0.001)  # the template reads as fast as it forks
