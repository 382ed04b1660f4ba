"""`flyte.with_runcontext(...)`: a named run with its own env vars that ignores the cache it
would otherwise hit (`overwrite_cache=True` runs the cached task again and stores anew)."""

import os
from pathlib import Path

import shoal as flyte

env = flyte.TaskEnvironment(name="port_runcontext")


@env.task(cache="auto")
async def count_visit(counter: str) -> int:
    with open(counter, "a") as f:  # one mark each time the body really runs
        f.write("x")
    return len(Path(counter).read_text())


@env.task
async def visit(counter: str) -> str:
    visits = await count_visit(counter)
    return f"{os.environ.get('PORT_FLAVOR', 'unset')}:{visits}"


if __name__ == "__main__":
    flyte.init_from_config()
    counter = str(Path.cwd() / "visits")
    first = flyte.run(visit, counter=counter)
    first.wait()
    second = flyte.run(visit, counter=counter)  # the same inputs: a cache hit
    second.wait()
    third = flyte.with_runcontext(
        name="port-ctx-rerun", env_vars={"PORT_FLAVOR": "mango"}, overwrite_cache=True
    ).run(visit, counter=counter)
    third.wait()
    print(f"RESULT first {first.outputs()}")
    print(f"RESULT second {second.outputs()}")
    print(f"RESULT third {third.name} {third.outputs()}")
    print(f"RESULT visits {len(Path(counter).read_text())}")
