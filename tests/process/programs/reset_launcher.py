"""A stand-in node launcher that resets its control socket while the engine stops the gang.

It speaks the launcher's side of `shoal._runtime.node.node_control` and nothing else (no zygote,
no ranks; a few milliseconds of Python). First start (restart 0): node 1 says its ranks
failed (code 1); node 0 waits until the engine's ``stop`` lies unread in its socket, which the
engine sends from ``_stop(keep=True)`` once node 1 failed, and exits without reading it. The
kernel then resets the engine's end (a Unix stream socket closed with unread data), so the
engine's read of node 0 raises ECONNRESET while it waits for the nodes: the restart race of
issue 26. ``RESET_MODE=torn`` makes node 0 write half a line before it exits instead.
Any later start (fresh launchers: the dead one cannot be kept): node 0 writes the task's
output (7) and both nodes say their ranks ended well.
"""

from __future__ import annotations

import json
import os
import socket
from urllib.parse import unquote, urlparse

from shoal import _contract as contract


def _line(sock: socket.socket) -> dict[str, object]:
    """The engine's next message, read to its newline and no further (what follows stays
    unread in the socket); exits on EOF (the engine let go)."""
    while True:
        seen = sock.recv(65536, socket.MSG_PEEK)
        if not seen:
            os._exit(0)
        if b"\n" in seen:
            return json.loads(sock.recv(seen.index(b"\n") + 1))


def _send(sock: socket.socket, message: dict[str, object]) -> None:
    sock.sendall((json.dumps(message) + "\n").encode())


def main() -> None:
    sock = socket.socket(fileno=int(os.environ[contract.CONTROL_FD]))
    node = int(os.environ[contract.NODE_RANK])
    _send(sock, {"ready": True})
    start = _line(sock)
    restart = int(start["start"]["restart_attempt"])  # type: ignore[index]
    if restart > 0:
        if node == 0:
            io = urlparse(os.environ[contract.IO])
            folder = os.path.join(unquote(io.path), f"r{restart}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "output.json"), "w") as f:
                f.write("7")
        _send(sock, {"ended": restart, "code": 0})
    elif node == 1:
        _send(sock, {"ended": restart, "code": 1})
    else:
        # Node 0: wait for the engine's stop, then go without taking it (a reset), or take
        # it and go half-way through the answer (a torn line, then EOF).
        if b"stop" not in sock.recv(65536, socket.MSG_PEEK):
            os._exit(4)  # not the race this program makes
        if os.environ.get("RESET_MODE") == "torn":
            _line(sock)
            sock.sendall(b'{"ended": 0, "co')
        os._exit(3)
    while True:  # until the engine closes the socket
        _line(sock)


if __name__ == "__main__":
    main()
