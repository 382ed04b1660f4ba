"""A TCP port free on this machine: a gang's master port, picked by whoever starts rank 0."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now ("" for every interface, where other nodes connect). Another
    process could take it before rank 0 binds it; the window is milliseconds and a restart
    picks a new one."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
