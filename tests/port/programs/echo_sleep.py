"""Flyte's Echo and Sleep task types, written after Flyte's examples/plugins/echo_example.py and
sleep_example.py: an environment whose task returns its input, one whose task waits for its
``timedelta``, and a driver that calls both. Flyte answers both in its backend without a pod;
so does Shoal's driver, so neither body runs here (each would leave a marker file). Only the
imports are Shoal's."""

import time
from datetime import timedelta
from pathlib import Path

import shoal as flyte
from shoal.extras import Sleep
from shoal.plugins.echo import Echo

image = flyte.Image.from_debian_base(python_version=(3, 12))

echo_env = flyte.TaskEnvironment(name="port-echo", image=image, plugin_config=Echo())
sleep_env = flyte.TaskEnvironment(name="port-sleep", image=image, plugin_config=Sleep())
driver_env = flyte.TaskEnvironment(name="port-echo-sleep", depends_on=[echo_env, sleep_env])


@echo_env.task
async def echo_identity(message: str) -> str:
    Path("echo-body-ran").touch()
    return message


@sleep_env.task
async def sleep_for(duration: timedelta) -> None:
    Path("sleep-body-ran").touch()
    return None


@driver_env.task
async def main(message: str, seconds: float) -> str:
    start = time.monotonic()
    await sleep_for(timedelta(seconds=seconds))
    slept = time.monotonic() - start
    echoed = await echo_identity(message)
    return f"{echoed} slept={slept:.3f}"


if __name__ == "__main__":
    flyte.init_from_config()
    alone = flyte.run(echo_identity, message="hello")
    alone.wait()
    print(f"RESULT echo {alone.outputs()[0]}")
    both = flyte.run(main, message="hi", seconds=0.3)
    both.wait()
    print(f"RESULT main {both.outputs()[0]}")
    print(f"RESULT runs {alone.name} {both.name}")
