"""Binding the port and serving: the socket is bound here, before uvicorn starts, so a port in
use is one clear error (naming the port and ``--port``) instead of uvicorn's log lines."""

from __future__ import annotations

import errno
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

from shoal._ui.app import build_app
from shoal._ui.guard import allowed_hosts
from shoal.errors import SpecError


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SpecError("--port", port, f"is already in use on {host} (another `shoal ui` "
                            "or another program listens there)",
                            f"pass a free one, e.g. --port {port + 1}, or --port 0 for any free "
                            "port") from None
        raise SpecError("--host", host, f"cannot be bound ({e.strerror})",
                        "pass an address of this machine, e.g. --host 127.0.0.1") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(home: Path, host: str, port: int,
          announce: Callable[[str], None] = print) -> None:
    """Serve until interrupted; ``announce`` gets the URL with the token once listening."""
    import uvicorn

    sock = bind(host, port)
    port = int(sock.getsockname()[1])
    token = secrets.token_urlsafe(24)
    shown = ("127.0.0.1" if host in ("0.0.0.0", "::")  # every address: show loopback's
             else f"[{host}]" if ":" in host else host)
    app = build_app(home, token=token, hosts=allowed_hosts(host, port), port=port)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1,
                            access_log=False)
    server = uvicorn.Server(config)
    announce(f"http://{shown}:{port}/?token={token}")
    server.run(sockets=[sock])
