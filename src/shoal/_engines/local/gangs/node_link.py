"""The local engine's end of a node launcher's control socket (`_runtime.node.node_control`).

A gang's launchers outlive its restarts: after a rank failed (its launcher says ``failing`` as
it starts stopping its own ranks), the engine asks the other nodes to stop theirs (`stop`) at
once, so the nodes stop in parallel; it waits until every node said its ranks ended, and
starts the next restart in the same launchers (`start`: a fresh master port, the restart
number, its log folder), whose zygotes fork the new ranks at once. A launcher that died, or
did not stop its ranks in time, is ended and the gang is started afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal._engines.local import procs
from shoal._engines.local.containers import Container


@dataclass(eq=False)
class NodeLink:
    proc: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    # When the launcher last said anything (monotonic): an elastic gang's launchers say
    # "alive" every heartbeat, so a silent one is lost (`_runtime.node.node_control`).
    heard: float = field(default_factory=time.monotonic)
    # Called with each message the engine does not wait for (a Ray head's cluster addresses).
    on_message: Callable[[dict[str, Any]], None] | None = None
    box: Container | None = None  # the container it runs in (`--containers`), ended by name
    # Set when the launcher says a rank of its current start failed (``{"failing": k}``),
    # before it stops its other ranks: the engine stops the other nodes meanwhile.
    failing: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def open(cls, proc: asyncio.subprocess.Process, sock: socket.socket,
                   box: Container | None = None) -> NodeLink:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(proc, reader, writer, box=box)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and not self.writer.is_closing()

    async def _line(self) -> bytes:
        """The launcher's next message; b"" once its socket is closed or was reset: that is
        the node ending, never an error of the engine (`ended` then reads its exit code).

        A reset is what a launcher that ends with a message of the engine still unread (a
        ``stop`` sent as it was killed, or as it exited) leaves: closing a Unix stream
        socket with unread data makes the kernel reset the peer's end, whose read then
        raises ECONNRESET instead of seeing EOF. A line cut short by the launcher's end (no
        newline) is its end too, not a message."""
        try:
            line = await self.reader.readline()
        except (ConnectionError, OSError):
            return b""
        self.heard = time.monotonic()
        return line if line.endswith(b"\n") else b""

    async def ready(self) -> None:
        """Once the launcher is ready to start ranks (or gone: `ended` then says so)."""
        while line := await self._line():
            if "ready" in json.loads(line):
                if self.box is not None:
                    self.box.started()
                return

    async def ended(self) -> int:
        """The node's exit code for its current start, once its ranks have all ended (the
        launcher's own exit code if it died first; never 0 then)."""
        while True:
            line = await self._line()
            if not line:
                code = await self.proc.wait()
                return code or 1
            message = json.loads(line)
            if "ended" in message:
                return int(message["code"])
            if "failing" in message:
                self.failing.set()
                continue
            if self.on_message is not None and "alive" not in message:
                self.on_message(message)

    def send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.writer.write((json.dumps(message) + "\n").encode())

    async def close(self, timeout: float = 10.0) -> None:
        """Let the launcher exit (EOF on its socket); end its tree if it does not."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.writer.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            with contextlib.suppress(ProcessLookupError, asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 10)
        if self.box is not None:
            await self.box.exit()  # reaped: removed

    async def kill(self, grace: float = 0.0) -> None:
        """End the node: its process tree (SIGTERM, ``grace``, SIGKILL), or its container by
        name (a container's processes are outside this process's tree)."""
        if self.box is not None:
            await self.box.stop(grace)
        else:
            await procs.kill_tree(self.proc.pid, grace)
