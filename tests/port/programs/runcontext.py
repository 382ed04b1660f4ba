"""`flyte.with_runcontext(...)`: a run that ignores the cache it would otherwise hit
(`overwrite_cache=True` runs the cached task again and stores anew); a named run with its own
env vars."""

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
    counter = Path.cwd() / "visits"
    first = flyte.run(visit, counter=str(counter))
    first.wait()
    second = flyte.run(visit, counter=str(counter))  # the same inputs: a cache hit
    second.wait()
    third = flyte.with_runcontext(overwrite_cache=True).run(visit, counter=str(counter))
    third.wait()
    print(f"RESULT first {first.outputs()}")
    print(f"RESULT second {second.outputs()}")
    print(f"RESULT third {third.outputs()}")
    print(f"RESULT visits {len(counter.read_text())}")
    named = flyte.with_runcontext(name="port-ctx-named", env_vars={"PORT_FLAVOR": "mango"})
    fourth = named.run(visit, counter=str(counter))
    fourth.wait()
    print(f"RESULT fourth {fourth.name} {fourth.outputs()}")
