"""Tasks for the real-process tests of the local engine."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

import shoal

leaf = shoal.TaskEnvironment(name="leaf", env_vars={"GREETING": "hello"})
cached = shoal.TaskEnvironment(name="cached", cache="auto")
lonely = shoal.TaskEnvironment(name="lonely")
root = shoal.TaskEnvironment(name="root", depends_on=[leaf, cached])


@dataclass
class Info:
    pid: int
    greeting: str
    action: str


@leaf.task
def square(x: int) -> int:
    return x * x


@leaf.task
async def info() -> Info:
    c = shoal.ctx()
    return Info(os.getpid(), os.environ.get("GREETING", ""), c.action or "")


@leaf.task
def boom(message: str) -> int:
    print("about to fail")
    raise ValueError(message)


@leaf.task(retries=2)
def flaky(marker_dir: str) -> int:
    """Fails twice (counted by files), then succeeds on attempt 2."""
    n = len(os.listdir(marker_dir))
    open(os.path.join(marker_dir, f"attempt-{n}"), "w").close()
    if n < 2:
        raise RuntimeError(f"flaky failure {n}")
    return n


@leaf.task
def die(sig: int) -> int:
    print("dying now", flush=True)
    os.kill(os.getpid(), sig)
    time.sleep(5)
    return 0


@leaf.task(timeout=1)
def slow(seconds: float) -> str:
    # A child process too: a timeout must kill the whole tree.
    import subprocess

    p = subprocess.Popen(["sleep", str(seconds * 10)])
    with open(os.environ["PIDFILE"], "w") as f:
        f.write(str(p.pid))
    time.sleep(seconds)
    return "late"


@leaf.task
def hold(seconds: float) -> float:
    start = time.time()
    time.sleep(seconds)
    return start


@cached.task
def expensive(x: int, marker_dir: str) -> int:
    open(os.path.join(marker_dir, f"ran-{time.time_ns()}"), "w").close()
    return x + 1


@lonely.task
def unreachable() -> int:
    return 1


@root.task
async def fan_out(n: int) -> list[int]:
    return list(await asyncio.gather(*(square.aio(i) for i in range(n))))


@root.task
async def sum_squares(n: int) -> int:
    return sum(await asyncio.gather(*(square.aio(i) for i in range(n))))


@root.task
async def calls_info() -> Info:
    return await info()


@root.task
async def calls_boom() -> int:
    return await boom.aio("bad thing")


@root.task
async def catches_boom() -> str:
    try:
        await boom.aio("caught")
    except shoal.errors.TaskFailed as e:
        return f"caught: {e.info.message}"
    return "no error"


@root.task
async def calls_unreachable() -> int:
    return await unreachable.aio()


@root.task
def sync_parent(n: int) -> int:
    return sum(square(i) for i in range(n))


@root.task
async def parallel_hold(n: int, seconds: float) -> list[float]:
    return list(await asyncio.gather(*(hold.aio(seconds) for _ in range(n))))


@root.task
async def use_cache(x: int, marker_dir: str) -> int:
    return await expensive.aio(x, marker_dir)


@leaf.task
def sleeper(seconds: float) -> int:
    time.sleep(seconds)
    return 0


_ = signal  # used by tests through die(sig)
