"""What a factory process does to fork children that are what fresh processes would be: the
node's rank zygote (`node/zygote.py`), torchrun's forking agent (`node/torchrun_agent.py`) and
the run's worker template (`worker_template.py`).

A factory imports what its children need once (`preimport`: it refuses when a thread runs,
since a fork copies threads' locks but not the threads), dies with its parent
(`die_with_parent`), and each child resets what a fork carries over (`as_fresh`) and ends at
its own process boundary (`exit_after`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

_PR_SET_PDEATHSIG = 1


def os_threads() -> int:
    """Threads of this process as the kernel counts them (Python's count misses C threads)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def die_with_parent() -> None:
    """Be killed (SIGKILL) when the parent thread that started this process ends."""
    if sys.platform.startswith("linux"):
        # Where prctl is missing, EOF on the request pipe still ends it.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def preimport(names: tuple[str, ...]) -> str:
    """Import ``names``; '' when done, else why not (the caller then starts its processes
    afresh)."""
    import importlib

    try:
        for name in names:
            importlib.import_module(name)
    except Exception as e:  # a broken install: the processes started afresh say it in their logs
        return f"could not pre-import {name} ({type(e).__name__}: {e})"
    threads = os_threads()
    if threads > 1:
        return (f"{threads} threads run after the pre-imports (set OMP_NUM_THREADS=1 for torch): "
                "forking would copy their locks but not them")
    # What the pre-imports made lives as long as the process: out of the collector, so that a
    # forked child's full collection neither walks those objects nor, by touching their
    # headers, copies the pages they share with this process.
    gc.freeze()
    return ""


def as_fresh(env: dict[str, str], cwd: str, module_file: str) -> None:
    """In a forked child: the environment ``env`` exactly, the working directory, ``sys.argv``
    as ``python -m <module>`` sets it, Python's default SIGCHLD and an empty signal mask,
    numpy's global generator reseeded (``random`` reseeds itself at fork): what a fresh
    interpreter started for that module would have."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the parent's, not a fresh process's
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module_file]
    if "numpy" in sys.modules:  # a fresh process seeds it from the OS; a fork copies it
        sys.modules["numpy"].random.seed()


def exit_after(body: Callable[[], None]) -> NoReturn:
    """Run a forked child's ``body`` and end the process with its exit code (0, a
    ``SystemExit``'s, or 1 with the traceback in its log for anything else: the child's
    process boundary), its output flushed; never returns to the parent's code."""
    code = 1
    try:
        body()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # the process boundary: shown in its log, exit code 1
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
