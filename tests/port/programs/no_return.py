"""Tasks without a return annotation return None, as in Flyte; and a script that starts a run
and exits without waiting, as most of Flyte's examples do, still has its run finish."""

from pathlib import Path

import shoal as flyte

env = flyte.TaskEnvironment(name="port_no_return")


@env.task
async def write_marker(path: str, text: str):
    Path(path).write_text(text)


@env.task
async def main(path: str):
    await write_marker(path, f"written to {Path(path).name} by a task with no return annotation")


if __name__ == "__main__":
    flyte.init_from_config()
    waited = flyte.run(main, path=str(Path.cwd() / "waited.txt"))
    waited.wait()
    print(f"RESULT outputs {waited.outputs()}")
    left = flyte.run(main, path=str(Path.cwd() / "not-waited.txt"))
    print(f"RESULT url {left.url}")
