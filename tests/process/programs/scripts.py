"""A script that starts runs the way Flyte 2's examples do (`python scripts.py SCENARIO [ARG]`),
for the tests of run handles, the exit hook and init_from_config. Its tasks also serve the
in-process tests of with_runcontext."""

from __future__ import annotations

import json
import os
import sys
import time

import shoal

leaf = shoal.TaskEnvironment(name="script_leaf")
cached = shoal.TaskEnvironment(name="script_cached", cache="auto")
driver = shoal.TaskEnvironment(name="script_driver", depends_on=[leaf, cached])


@leaf.task
async def leaf_env(name: str) -> str:
    return os.environ.get(name, "<unset>")


@driver.task
async def both_env(name: str) -> list[str]:
    return [os.environ.get(name, "<unset>"), await leaf_env(name)]


@cached.task
def counted(x: int, marker_dir: str) -> int:
    """Leaves one file per execution, so a test can tell runs from cache hits."""
    open(os.path.join(marker_dir, f"ran-{time.time_ns()}"), "w").close()
    return x + 1


@driver.task
def hello(n: int) -> int:
    for i in range(n):
        print(f"line {i} from the root task", flush=True)
    return n * 10


@driver.task
def boom() -> int:
    print("about to fail", flush=True)
    raise ValueError("boom on purpose")


@driver.task
def sleepy(seconds: float) -> float:
    print("sleeping", flush=True)
    time.sleep(seconds)
    return seconds


@driver.task(timeout=0.5)
def too_slow() -> int:
    time.sleep(30)
    return 0


def main(scenario: str, arg: str | None) -> None:
    if scenario == "wait":
        shoal.init_from_config()
        run = shoal.run(hello, 3)
        print(json.dumps({"name": run.name, "url": run.url, "phase": str(run.phase)}))
        run.wait()
        print(json.dumps({"phase": str(run.phase), "status": run.status,
                          "outputs": run.outputs()[0]}))
    elif scenario == "fail":
        run = shoal.run(boom)
        for how in (run.wait, run.outputs):
            try:
                how()
            except shoal.errors.TaskFailed as e:
                print(json.dumps({"raised": type(e).__name__, "task": e.info.task,
                                  "kind": e.info.kind, "phase": str(run.phase)}))
    elif scenario == "nowait":
        run = shoal.run(sleepy, float(arg or "1"))
        print(json.dumps({"name": run.name}), flush=True)
    elif scenario == "nowait_fail":
        run = shoal.run(boom)
        print(json.dumps({"name": run.name}), flush=True)
    elif scenario == "nowait_then_sleep":
        run = shoal.run(sleepy, 60.0)
        print(json.dumps({"name": run.name}), flush=True)
        time.sleep(60)
    elif scenario == "config":
        shoal.init_from_config(arg) if arg else shoal.init_from_config()
        run = shoal.run(hello, 1)
        run.wait(quiet=True)
        print(json.dumps({"name": run.name, "url": run.url, "outputs": run.outputs()[0],
                          "registry": os.environ.get("SHOAL_IMAGE_REGISTRY")}))
    elif scenario == "aio":
        import asyncio

        async def go() -> int:
            run = await shoal.with_runcontext(mode="remote").run.aio(hello, 2)
            await run.wait.aio(quiet=True)
            return int((await run.outputs.aio())[0])

        print(json.dumps({"outputs": asyncio.run(go())}))
    else:
        sys.exit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
