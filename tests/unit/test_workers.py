"""The local engine's worker connections (``_engines/local/workers.py``) against real processes
on a real Unix socket: a stand-in worker (a few lines of Python) that says hello as a worker
does, then sends what the test wants it to."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest

from shoal._engines.local.workers import WorkerDied, WorkerSet
from shoal._runtime import messages as m

# Connects, says hello, waits for its first order, then answers with a frame whose body is
# not a pickle (as a worker whose connection was corrupted, or a mismatched Shoal, would).
STAND_IN = """
import os, socket, struct, sys, time
from shoal._runtime import messages as m
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(m.encode(m.Hello(worker_id=sys.argv[2], pid=os.getpid())))
(size,) = struct.unpack(">I", s.recv(4))
while size:
    size -= len(s.recv(size))
body = b"not a pickle"
s.sendall(struct.pack(">I", len(body)) + body)
time.sleep(60)
"""


def _environ() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def test_an_unreadable_answer_fails_the_call_and_ends_the_worker(tmp_path: Path) -> None:
    async def scenario() -> None:
        workers = WorkerSet(str(tmp_path / "engine.sock"), lambda worker, message: None)
        await workers.start()
        try:
            worker = await workers.spawn(
                "env#0", "w0",
                (sys.executable, "-c", STAND_IN, str(tmp_path / "engine.sock"), "w0"),
                _environ(), tmp_path / "w0.log", timeout=30)
            answer = worker.order(m.Shutdown())  # type: ignore[arg-type]  # any order will do
            with pytest.raises(WorkerDied) as died:
                await asyncio.wait_for(answer, 30)
            assert "could not read" in died.value.why and "UnpicklingError" in died.value.why
            assert await asyncio.wait_for(worker.proc.wait(), 10) < 0  # ended by a signal
            assert not worker.healthy
        finally:
            await workers.close()

    asyncio.run(scenario())


def test_a_stranger_that_sends_no_hello_is_hung_up_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = str(tmp_path / "engine.sock")
        workers = WorkerSet(path, lambda worker, message: None)
        await workers.start()
        try:
            await talk_to(workers, path)
        finally:
            await workers.close()

    async def talk_to(workers: WorkerSet, path: str) -> None:
        def stranger() -> bytes:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                s.sendall(b"\0\0\0\5hello")
                s.settimeout(10)
                return s.recv(1)  # b"" once the engine closes its end

        assert await asyncio.get_running_loop().run_in_executor(None, stranger) == b""
        # ... and it still serves the next connection.
        await workers.spawn("env#0", "w1", (sys.executable, "-c", STAND_IN, path, "w1"),
                            _environ(), tmp_path / "w1.log", timeout=30)

    asyncio.run(scenario())
