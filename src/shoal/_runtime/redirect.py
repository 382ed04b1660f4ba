"""Point a process's stdout and stderr, file descriptors 1 and 2, at a log file.

What Python prints, what C code writes and what child processes inherit all go there. The node
launcher does it for its node's log, the zygote for each rank it forks, a rank for its own log
and a rank under Nsight Systems for nsys's lines (`nsys_rank`).
"""

from __future__ import annotations

import os

from shoal._storage.private import FILE_MODE


def redirect_output(path: str) -> None:
    """Append fds 1 and 2 to ``path``, created readable by this user only if it is new."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
