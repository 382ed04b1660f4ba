"""A process's log file on this machine: pointing its stdout and stderr at one, and reading the
tail of one back for a failure.

`redirect_output` moves file descriptors 1 and 2, so what Python prints, what C code writes and
what child processes inherit all go to the log: the node launcher does it for its node's log,
the zygote for each rank it forks, a rank for its own log and a rank under Nsight Systems for
nsys's lines (`nsys_rank`). `log_tail` is the end of a log as a failure shows it: the engines
put it in a `FailureInfo`, the web UI under a gang's first failure.

A worker's calls write to its spool first (`spool_path`; `_runtime/worker.CallOutput`): a call
that prints nothing and ends quickly, as most calls of a fan-out do, makes no file of its own.
The spool becomes the call's log when the call ends having printed (a rename), or while it runs
once it has run `LINK_AFTER_SECONDS` (a hard link, so a follower sees its output live); the
engine moves it there when the worker died first (`rescue_spool`).
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal._storage.private import FILE_MODE

TAIL_LINES = 30
TAIL_BYTES = 64 * 1024  # read at most this much of the end, however long the log
# A call running this long has its log file, its output so far in it and the rest streamed.
LINK_AFTER_SECONDS = 0.05


def redirect_output(path: str) -> None:
    """Append fds 1 and 2 to ``path``, created readable by this user only if it is new."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def log_tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> str:
    """The last ``lines`` lines of a log file ('' if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def spool_path(log_dir: str | Path, worker_id: str) -> Path:
    """Where worker ``worker_id`` writes a call's output before the call's log file exists: a
    hidden file beside the call logs (the same filesystem, so it can become one)."""
    return Path(log_dir) / f".{worker_id}.out"


def rescue_spool(spool: Path, log: Path) -> None:
    """After the worker died during a call: its output moved from the spool to the call's log
    (the spool's other name removed when the log is already the spool's file)."""
    try:
        if log.exists():
            if os.path.samefile(spool, log):
                os.unlink(spool)
            return
        os.rename(spool, log)
    except OSError:
        return  # no spool (nothing printed, or already moved)
