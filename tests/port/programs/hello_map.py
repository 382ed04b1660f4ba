"""Hello, Flyte 2 style: a sync task maps another task over a list with `flyte.map`; the script
configures itself with `init_from_config`, starts the run, shows its name and page, waits."""

import shoal as flyte

env = flyte.TaskEnvironment(name="port_hello", resources=flyte.Resources(cpu=1, memory="250Mi"))


@env.task
def line(x: int) -> int:
    return 2 * x + 5


@env.task
def line_values(xs: list[int]) -> list[int]:
    # flyte.map is Python's map run in parallel; results come back in input order.
    ys = list(flyte.map(line, xs))
    return [*ys, line(xs[-1] + 1)]  # and one plain call of a sync task from a sync task


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(line_values, xs=list(range(10)))
    print(f"RESULT name {run.name}")
    print(f"RESULT url {run.url}")
    run.wait()
    print(f"RESULT phase {run.phase}")
    print(f"RESULT outputs {run.outputs()}")
