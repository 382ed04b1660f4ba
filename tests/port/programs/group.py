"""`with flyte.group(...)`: calls gathered under named groups, the way Flyte shows fan-outs."""

import asyncio

import shoal as flyte

env = flyte.TaskEnvironment(name="port_group")


@env.task
async def double(x: int) -> int:
    return 2 * x


@env.task
async def evens_then_odds(n: int) -> list[int]:
    with flyte.group("evens"):
        evens = await asyncio.gather(*(double(i) for i in range(0, n, 2)))
    with flyte.group("odds"):
        odds = await asyncio.gather(*(double(i) for i in range(1, n, 2)))
    return [*evens, *odds]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(evens_then_odds, n=6)
    run.wait()
    print(f"RESULT phase {run.phase}")
    print(f"RESULT outputs {run.outputs()}")
