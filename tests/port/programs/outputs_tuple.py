"""Flyte's `run.outputs()` is a tuple of the task's outputs, so Flyte code reads a single output
as `run.outputs()[0]` (its file_local and dir_local examples do)."""

import shoal as flyte

env = flyte.TaskEnvironment(name="port_outputs")


@env.task
async def shout(word: str) -> str:
    return word.upper() + "!"


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(shout, word="port")
    run.wait()
    print(f"RESULT first {run.outputs()[0]}")
