"""`task.override(...)` at the call site: other env vars and resources for one call, retries
for a flaky call; the task itself is left as it was."""

import os
from pathlib import Path

import shoal as flyte

env = flyte.TaskEnvironment(
    name="port_override",
    env_vars={"PORT_GREETING": "from-env"},
    resources=flyte.Resources(cpu=1, memory="200Mi"),
)


@env.task
async def greeting() -> str:
    return os.environ.get("PORT_GREETING", "unset")


@env.task
async def flaky(counter: str) -> int:
    # Each attempt leaves a mark; the first two fail, so only retries get it through.
    with open(counter, "a") as f:
        f.write("x")
    attempts = len(Path(counter).read_text())
    if attempts < 3:
        raise RuntimeError(f"attempt {attempts} fails on purpose")
    return attempts


@env.task
async def main(folder: str) -> list[str]:
    plain = await greeting()
    changed = await greeting.override(
        env_vars={"PORT_GREETING": "from-override"},
        resources=flyte.Resources(cpu=1, memory="300Mi"),
    )()
    try:
        await flaky(os.path.join(folder, "plain"))
        without = "plain-succeeded"
    except Exception:
        without = "plain-failed"  # no retries on the task itself: the first failure ends it
    attempts = await flaky.override(retries=2)(os.path.join(folder, "retried"))
    return [plain, changed, without, str(attempts)]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(main, folder=str(Path.cwd()))  # the marks land where it was started
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
