"""Whether the kernel's OOM killer acted inside one container: what ``OOMError`` rests on.

podman's own flag (``State.OOMKilled``) is set only where conmon sees the cgroup's OOM event;
on some machines (this one: cgroup v1 nested in a sandbox) it never is, and the container's
cgroup is removed with the container, its ``oom_kill`` counter with it. The kernel's log keeps
the fact: every kill inside a memory cgroup's limit is logged as ``oom-kill:...,
oom_memcg=<cgroup path>,...``, and the last part of a podman container's cgroup path holds
its id (``libpod-<id>``, ``libpod-<id>.scope``). Reading ``/dev/kmsg`` needs root (or
``kernel.dmesg_restrict=0``); where it cannot be read, only podman's flag counts.
"""

from __future__ import annotations

import contextlib
import os
import re

KMSG = "/dev/kmsg"
_OOM_MEMCG = re.compile(rb"oom-kill:.*?oom_memcg=([^,\s]*)")


def kernel_logged_oom(container_id: str, *, kmsg: str = KMSG) -> bool:
    """Whether the kernel's log names an OOM kill within the memory cgroup of the container
    ``container_id`` (its full id)."""
    if not container_id:
        return False
    want = container_id.encode()
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    found = False
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:  # the end of the buffer
                break
            except BrokenPipeError:  # a record overwritten while we read: the next one
                continue
            except OSError:
                break
            if not record:
                break
            # The cgroup's last segment: libpod-<id> (cgroupfs), libpod-<id>.scope (systemd).
            if any(want in m.group(1).rstrip(b"/").rsplit(b"/", 1)[-1]
                   for m in _OOM_MEMCG.finditer(record)):
                found = True
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return found
