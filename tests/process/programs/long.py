"""A run that stays busy long enough to be cancelled or to have its driver killed."""

from __future__ import annotations

import os
import time

import shoal

worker_env = shoal.TaskEnvironment(name="busy")
driver_env = shoal.TaskEnvironment(name="boss", depends_on=[worker_env])


@worker_env.task
def spin(seconds: float, pidfile: str) -> int:
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    return 1


@driver_env.task
async def main(seconds: float, pidfile: str) -> int:
    return await spin.aio(seconds, pidfile)
