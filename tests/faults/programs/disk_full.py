"""A task that saves a checkpoint version that fits its store, then one that does not.

The test runs it with the store on a 1 MiB tmpfs: step 0 (256 KiB) commits, step 1 (4 MiB)
runs out of space half-way through its payload.
"""

from __future__ import annotations

import random
import time

import shoal

FITS = 256 * 1024
TOO_BIG = 4 * 1024 * 1024

env = shoal.TaskEnvironment(name="saver", resources=shoal.Resources(cpu=1, memory="256Mi"))


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


@env.task
def fill(seed: int) -> int:
    checkpoint = shoal.ctx().checkpoint
    checkpoint.save_sync(payload(FITS, seed), step=0)
    print(f"checkpoint uri: {checkpoint.uri}", flush=True)
    started = time.monotonic()
    try:
        checkpoint.save_sync(payload(TOO_BIG, seed + 1), step=1)
    finally:  # the test reports how long the failing save took to say so
        print(f"step 1 save ended after {time.monotonic() - started:.3f} s", flush=True)
    return 1
