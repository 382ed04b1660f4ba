"""`shoal.logger` in task processes: `python user_logged.py [LEVEL]` runs `process` (which
calls `steps`, in a process of its own) and waits; its lines land in each task's log."""

from __future__ import annotations

import sys

import shoal

leaf = shoal.TaskEnvironment(name="log_leaf")
env = shoal.TaskEnvironment(name="log_demo", depends_on=[leaf])


@leaf.task
def steps(n: int) -> int:
    for i in range(n):
        shoal.logger.debug("step %d of %d", i + 1, n)
    shoal.logger.info("did %d steps", n)
    return n


@env.task
def process(name: str) -> str:
    shoal.logger.info("starting %s", name)
    done = steps(2)
    shoal.logger.warning("finished %s after %d steps", name, done)
    return name


if __name__ == "__main__":
    context = shoal.with_runcontext(user_log_level=sys.argv[1]) if len(sys.argv) > 1 else shoal
    run = context.run(process, name="hello")
    run.wait()
    print(run.name)
