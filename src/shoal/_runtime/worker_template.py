"""A local run's worker factory: a process that has imported Shoal's worker runtime once and
forks the run's workers from that state.

Started by the local engine (`_engines/local/templates.py`) as ``python -m
shoal._runtime.worker_template`` with the environment a worker inherits. It never starts a
thread (it checks after its imports), so forking it is safe; a worker then costs a fork and
the user's own imports, not an interpreter start plus Shoal's imports (~0.15 s of CPU on 2
cores, paid again for each worker a fan-out adds and each call of ``reusable="off"``).

Protocol, one JSON line each way on stdin (requests) and stdout (replies): it first says
``{"ready": bool, "why": "..."}``; then for each ``{"id": "<worker id>", "env": {...}, "cwd":
"...", "log": "..."}`` it forks and answers ``{"id": ..., "pid": p}``, and when one of its
workers ends, ``{"exit": p, "code": c}`` (asyncio's convention: ``-N`` for signal N). It is each
worker's parent and reaps it; a worker dies with it (the parent-death signal), so the engine,
which reads its EOF, knows none is left running unseen. EOF on stdin ends it: the engine closes
it, or the engine's process is gone. Between two runs of one process it waits idle (the
engine's `templates.put_away`).

Each worker starts as a fresh ``python -m shoal._runtime.worker`` would: exactly the
environment it is given, the working directory, ``sys.argv``, a session of its own, stdin on
/dev/null, stdout and stderr appended to its log, Python's default signal dispositions and an
empty signal mask, numpy's global generator reseeded (``random`` reseeds itself at fork). The
user's module is imported by the worker, never here; its /proc/<pid>/cmdline and environ (what
`ps` and psutil show) are a fresh worker's. What a fork cannot renew: the
interpreter's string-hash seed is the template's, and what an interpreter reads only as it
starts (``PYTHON*``, ``LD_*``, the locale, ``TZ``, ``HOME``), which is why the engine forks only
workers whose such variables are the template's (`templates.STARTUP_PREFIXES`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from typing import Any

from shoal._runtime.forks import as_fresh, die_with_parent, exit_after, preimport
from shoal._runtime.log_files import redirect_output

# What a worker imports as it starts and at its first call (the task loader, the inputs'
# codecs, the store, the context and its checkpoint, metrics), and what a task file's own
# imports of Shoal load. None of them starts a thread at import (checked by `forks.preimport`).
PREIMPORTS = ("shoal", "shoal._runtime.worker", "shoal._runtime.loader", "shoal._storage.codecs",
              "shoal._storage.blobs", "shoal._storage.call_io", "shoal._runtime.context",
              "shoal._runtime.observe.metrics", "shoal._runtime.observe.report_scope")


def _reply(message: dict[str, Any]) -> None:
    # One write of a short line: replies never interleave.
    os.write(1, (json.dumps(message) + "\n").encode())


# The engine starts the template with `contract.TEMPLATE_ROOM` this long, so that its
# environment's block (what /proc/<pid>/environ shows) has room for a worker's, which is longer.
ROOM_BYTES = 32 * 1024
_START_CWD = os.getcwd()


def _show_as(argv: list[str], environ: dict[str, str]) -> None:
    """Make this process's /proc/<pid>/cmdline and environ (what `ps`, psutil and an
    operator read) say what a fresh worker's say: the blocks the kernel shows are rewritten
    in place, padded with NULs (as `setproctitle` does), when the new text fits. The C
    ``environ`` no longer points into that block (``os.environ.clear`` unset every variable),
    and Python keeps its own copy of ``argv``."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # proc(5): fields 48-51, counted from 1; the split starts at field 3.
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
        # The command as one line, and the block's last byte not NUL: the kernel then shows
        # the block up to its first NUL, and psutil splits that line at its spaces.
        title = os.fsencode(" ".join(argv))
        env = b"".join(os.fsencode(f"{k}={v}") + b"\0" for k, v in environ.items())
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            if len(title) + 2 <= arg_end - arg_start:
                mem.seek(arg_start)
                mem.write(title.ljust(arg_end - arg_start - 1, b"\0") + b" ")
            if len(env) <= env_end - env_start:
                mem.seek(env_start)
                mem.write(env.ljust(env_end - env_start, b"\0"))
    except (OSError, ValueError):
        pass  # not Linux, or /proc not mounted: only what tools show differs


def _worker_child(request: dict[str, Any], template: int, close: tuple[int, ...]) -> None:
    """In the forked worker: become what a fresh worker process is, then run it; never
    returns."""

    def body() -> None:
        os.setsid()
        die_with_parent()
        if os.getppid() != template:  # it died before the signal was armed
            raise SystemExit(1)
        signal.set_wakeup_fd(-1)
        for fd in close:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        redirect_output(str(request["log"]))
        env = request["env"]
        assert isinstance(env, dict)
        from shoal._runtime import worker

        as_fresh(env, str(request["cwd"]), worker.__file__ or "")
        if sys.path and sys.path[0] == _START_CWD:  # `-m` put the folder it started in first
            sys.path[0] = os.getcwd()
        _show_as([sys.executable, "-m", "shoal._runtime.worker"], env)
        worker.main()

    exit_after(body)


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def serve() -> None:
    # Not `die_with_parent`: that signal comes when the *thread* that started this process
    # ends, and the engine may keep this template for the process's next run after the run's
    # thread is gone. EOF on stdin, when the engine's process closes it or dies, ends it.
    why = preimport(PREIMPORTS)
    _reply({"ready": not why, "why": why})
    if why:
        return
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd hears it
    me, buffered = os.getpid(), b""
    while True:
        ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            _reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return  # the engine closed it, or is gone
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                _reply({"id": request["id"], "error": str(e)})
                continue
            if pid == 0:
                _worker_child(request, me, (wake_r, wake_w))
            _reply({"id": request["id"], "pid": pid})


if __name__ == "__main__":
    serve()
