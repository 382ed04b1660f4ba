"""The node launcher's end of its control socket to the local engine (`contract.CONTROL_FD`).

JSON lines. The launcher says ``{"ready": true}`` once it can start ranks (its zygote's imports
done), ``{"failing": restart}`` when a rank of a start failed and it begins stopping the others
(not when the rank timed out in a collective: its peers are recorded first), and
``{"ended": restart, "code": n}`` when the ranks of a start have all ended (n: the node's exit
code, 0 when it was told to stop); the engine says
``{"stop": grace}`` (stop the ranks now: SIGTERM, ``grace`` s, SIGKILL),
``{"start": {...}}`` (start, the first time once every node is ready, so that the gang's ranks
start together; then each restart: new master port, restart number, log folders) or closes
the socket (exit). The launchers of a gang thus outlive its restarts. Without the
variable (Kubernetes pods, Slurm steps) a launcher runs one start and exits with its code.

A start with ``"heartbeat": s`` (an elastic gang's) makes the launcher say ``{"alive": t}``
every ``s`` seconds from then on, from a thread of its own: a node whose launcher stays silent
for the gang's ``monitor_interval`` (its host frozen, its process stopped) is lost to the engine
even though its socket is still open.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
from collections import deque
from typing import Any

from shoal import _contract as contract


class Control:
    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(True)
        self._buffered = b""
        self._messages: deque[dict[str, Any]] = deque()
        self.closed = False
        self._sending = threading.Lock()  # the heartbeat's lines never split another's
        self._beating = False
        # Wall time at which this node ends itself, when the engine keeps its Ray cluster
        # for clients (`{"expire": seconds}`): kept even after the engine closes.
        self.expires_at: float | None = None

    @classmethod
    def from_env(cls) -> Control | None:
        fd = os.environ.pop(contract.CONTROL_FD, "")  # not a variable of the ranks
        return cls(int(fd)) if fd else None

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> None:
        """Read what the socket has now (call when it is readable); EOF sets ``closed``."""
        try:
            chunk = self.sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self._buffered += chunk
        *lines, self._buffered = self._buffered.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            message = json.loads(line)
            if "expire" in message:  # a kept Ray cluster: its nodes end themselves then
                self.expires_at = time.time() + float(message["expire"])
            else:
                self._messages.append(message)

    def take(self) -> dict[str, Any] | None:
        return self._messages.popleft() if self._messages else None

    def take_stop(self) -> float | None:
        """The grace period of a stop the engine sent, if it sent one (other messages stay)."""
        for message in list(self._messages):
            if "stop" in message:
                self._messages.remove(message)
                return float(message["stop"])
        return None

    def send(self, message: dict[str, Any]) -> None:
        try:
            with self._sending:
                self.sock.sendall((json.dumps(message) + "\n").encode())
        except OSError:
            self.closed = True

    def start_heartbeat(self, every: float) -> None:
        """Say "alive" every ``every`` seconds until the socket closes (once per process)."""
        if self._beating or every <= 0:
            return
        self._beating = True

        def beat() -> None:
            while not self.closed:
                self.send({"alive": time.time()})
                time.sleep(every)

        threading.Thread(target=beat, name="shoal-heartbeat", daemon=True).start()

    def next_start(self) -> dict[str, Any] | None:
        """Block until the engine says what comes next: a start's settings, or None (exit;
        also once `expires_at` passes). A stop that crossed the node's own
        end is moot and skipped."""
        while True:
            message = self.take()
            if message is not None:
                if "start" in message:
                    start: dict[str, Any] = message["start"]
                    return start
                continue
            if self.closed:
                return None
            until = self.expires_at
            if until is not None:
                left = until - time.time()
                if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                    return None
            self.receive()
