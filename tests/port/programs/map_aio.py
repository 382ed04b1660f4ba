"""`flyte.map.aio` in an async task: at most two calls in flight, a failing call handed back as
an exception instead of ending the map, results in input order although later inputs finish
first."""

import asyncio
import time

import shoal as flyte

env = flyte.TaskEnvironment(name="port_map_aio")


@env.task
async def slow_square(x: int) -> dict[str, float]:
    start = time.time()
    await asyncio.sleep(0.5 - 0.07 * x)  # later inputs finish sooner
    if x == 3:
        raise ValueError("3 is unlucky")
    return {"value": float(x * x), "start": start, "end": time.time()}


@env.task
async def squares(n: int) -> list[str]:
    out: list[str] = []
    spans: list[tuple[float, float]] = []
    async for r in flyte.map.aio(slow_square, range(n), concurrency=2, return_exceptions=True):
        if isinstance(r, Exception):
            out.append("error" if "unlucky" in str(r) else f"unexpected {r!r}")
        else:
            out.append(str(int(r["value"])))
            spans.append((r["start"], r["end"]))
    # The most calls that were running at once, seen from inside the calls.
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    return [*out, f"peak={peak}"]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(squares, n=6)
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
