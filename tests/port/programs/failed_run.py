"""A run whose task raises: `run.wait()` raises with the task's error, the run's phase says it
failed, and asking for its outputs raises too."""

import shoal as flyte

env = flyte.TaskEnvironment(name="port_failed")


@env.task
async def check_budget(spent: int, limit: int) -> int:
    if spent > limit:
        raise ValueError(f"budget exceeded: {spent} > {limit}")
    return limit - spent


@env.task
async def main(spent: int) -> int:
    return await check_budget(spent, 5)


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(main, spent=7)
    try:
        run.wait()
    except Exception as e:
        print(f"RESULT wait raised {type(e).__name__}: {e}".replace("\n", " | "))
    else:
        print("RESULT wait returned")
    print(f"RESULT phase {run.phase}")
    try:
        run.outputs()
    except Exception as e:
        print(f"RESULT outputs raised {e}".replace("\n", " | "))
    else:
        print("RESULT outputs returned")
