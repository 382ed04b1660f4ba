"""`@flyte.trace` on a plain async function inside a task that fails once after its traced
steps: the retry replays the recorded steps instead of running them again."""

from pathlib import Path

import shoal as flyte

env = flyte.TaskEnvironment(name="port_trace")


@flyte.trace
async def expensive_square(x: int, log: str) -> int:
    with open(log, "a") as f:  # one line each time the body really runs
        f.write(f"{x}\n")
    return x * x


@env.task(retries=1)
async def sum_squares(n: int, log: str, attempts: str) -> int:
    with open(attempts, "a") as f:
        f.write("x")
    total = 0
    for i in range(n):
        total += await expensive_square(i, log)
    if len(Path(attempts).read_text()) == 1:
        raise RuntimeError("the first attempt fails after its traced steps")
    return total


if __name__ == "__main__":
    flyte.init_from_config()
    log, attempts = Path.cwd() / "traced.log", Path.cwd() / "attempts"
    run = flyte.run(sum_squares, n=4, log=str(log), attempts=str(attempts))
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
    print(f"RESULT attempts {len(attempts.read_text())}")
    print(f"RESULT executed {log.read_text().split()}")
