"""Binding the port and serving: the socket is bound here, before uvicorn starts, so a port in
use is one clear error (naming the port and ``--port``) instead of uvicorn's log lines.

Loopback only unless asked: another address needs ``--allow-remote``, and then either TLS
(``--certfile``/``--keyfile``) or a warning that the token and the runs travel in clear.
"""

from __future__ import annotations

import errno
import ipaddress
import secrets
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shoal._ui.app import build_app
from shoal._ui.guard import allowed_hosts
from shoal.errors import SpecError


@dataclass(frozen=True)
class Tls:
    certfile: str
    keyfile: str


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or ``localhost``: addresses no other machine can reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_listen(host: str, *, allow_remote: bool, certfile: str | None,
                 keyfile: str | None) -> tuple[Tls | None, str | None]:
    """The TLS files to serve with and the warning to print, or the `SpecError` that refuses
    the combination, before anything is bound."""
    if (certfile is None) != (keyfile is None):
        given, missing = ("--certfile", "--keyfile") if keyfile is None else ("--keyfile",
                                                                             "--certfile")
        raise SpecError(missing, None, f"is needed with {given} (TLS takes both)",
                        "pass --certfile CERT.pem --keyfile KEY.pem, or neither")
    tls = None
    if certfile is not None and keyfile is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile,
                                                                                 keyfile)
        except (OSError, ssl.SSLError) as e:
            raise SpecError("--certfile", certfile, f"with --keyfile {keyfile} cannot be "
                            f"loaded ({e})", "pass a PEM certificate and its private key") \
                from None
        tls = Tls(certfile, keyfile)
    if is_loopback(host):
        return tls, None
    if not allow_remote:
        raise SpecError("--host", host, "is not a loopback address (127.0.0.0/8, ::1, "
                        "localhost): other machines could reach the UI and its Cancel button",
                        "keep the default and tunnel (`ssh -L 8484:127.0.0.1:8484 HOST`), or "
                        "pass --allow-remote (with --certfile/--keyfile to serve HTTPS)")
    if tls is None:
        return None, (f"shoal ui: warning: serving plain HTTP on {host}: the token and the "
                      "runs' data travel in clear on the network; pass --certfile/--keyfile "
                      "for HTTPS, or keep 127.0.0.1 and tunnel with ssh -L")
    return tls, None


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
          announce: Callable[[str], None] = print, *, tls: Tls | None = None) -> None:
    """Serve until interrupted; ``announce`` gets the URL with the token once listening."""
    import uvicorn

    sock = bind(host, port)
    port = int(sock.getsockname()[1])
    token = secrets.token_urlsafe(24)
    shown = ("127.0.0.1" if host in ("0.0.0.0", "::")  # every address: show loopback's
             else f"[{host}]" if ":" in host else host)
    scheme = "https" if tls is not None else "http"
    app = build_app(home, token=token, hosts=allowed_hosts(host, port), port=port,
                    scheme=scheme)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1,
                            access_log=False,
                            ssl_certfile=tls.certfile if tls is not None else None,
                            ssl_keyfile=tls.keyfile if tls is not None else None)
    server = uvicorn.Server(config)
    announce(f"{scheme}://{shown}:{port}/?token={token}")
    server.run(sockets=[sock])
