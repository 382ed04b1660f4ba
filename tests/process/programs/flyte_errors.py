"""Tasks that fail the ways Flyte 2 code catches: by `RuntimeUserError.code`, `OOMError`, and
`NonRecoverableError` (no retries)."""

from __future__ import annotations

from pathlib import Path

import shoal
import shoal.errors

env = shoal.TaskEnvironment(name="errs")
small = shoal.TaskEnvironment(name="errs_small", resources=shoal.Resources(memory="200Mi"))
driver = shoal.TaskEnvironment(name="errs_driver", depends_on=[env, small])


@env.task
async def raises_value_error(x: int) -> int:
    raise ValueError(f"bad {x}")


@driver.task
async def catches_by_code() -> str:
    try:
        await raises_value_error(1)
    except shoal.errors.RuntimeUserError as e:
        return f"{type(e).__name__} {e.code} {e.kind}"
    return "not raised"


@env.task(retries=3)
async def gives_up(marker: str) -> int:
    with open(marker, "a") as f:
        f.write("x")
    raise shoal.errors.NonRecoverableError("the input cannot be parsed")


@small.task
async def hog(mib: int) -> int:
    block = bytearray(mib * 1024 * 1024)  # touched, so it is resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    import time

    time.sleep(5)  # the engine samples memory; a task this big must not finish first
    return len(block)


@driver.task
async def catches_oom(mib: int) -> str:
    try:
        await hog(mib)
    except shoal.errors.OOMError as e:
        grown = await hog.override(resources=shoal.Resources(memory="2Gi"))(mib)
        return f"{e.code} then {grown // (1024 * 1024)} MiB"
    return "no OOM"


def attempts(marker: str) -> int:
    return len(Path(marker).read_text())
