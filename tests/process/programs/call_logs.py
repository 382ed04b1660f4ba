"""Tasks whose output, or lack of it, tests/process/test_call_logs.py looks for in their logs."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import shoal

leaf = shoal.TaskEnvironment(name="leaf")
driver = shoal.TaskEnvironment(name="driver", depends_on=[leaf])


@leaf.task
async def silent(i: int) -> int:
    return i


@leaf.task
async def loud(i: int) -> int:
    print(f"loud {i} says hello")
    os.write(2, f"loud {i} from C\n".encode())  # fd 2 itself, as C code and children write
    return i


@driver.task
async def fan_out(n: int) -> int:
    quiet = await asyncio.gather(*(silent(i) for i in range(n)))
    said = await asyncio.gather(*(loud(i) for i in range(2)))
    return sum(quiet) + sum(said)


@leaf.task
def waits_for(flag: str) -> str:
    """Prints, then runs until ``flag`` exists: its log must show the line meanwhile."""
    print("before the wait", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.02)
    print("after the wait", flush=True)
    return "done"


@leaf.task
def dies_after_printing() -> None:
    print("last words", flush=True)
    sys.stdout.flush()
    os._exit(3)


@driver.task
async def silent_then_dies() -> None:
    """A silent call on a worker, then one that prints and dies quickly on the same kind."""
    await silent(1)
    await dies_after_printing()
