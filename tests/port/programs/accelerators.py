"""Flyte's accelerator names: `gpu="A100 80G:8"` (a name with a space) and `flyte.GPU(...)`; on
a machine without those GPUs the calls still run (Shoal emulates them on CPU, with a warning)."""

import shoal as flyte

a100 = flyte.TaskEnvironment(
    name="port_a100", resources=flyte.Resources(cpu=1, memory="1Gi", gpu="A100 80G:8")
)
h100 = flyte.TaskEnvironment(
    name="port_h100",
    resources=flyte.Resources(cpu=1, memory="1Gi", gpu=flyte.GPU(device="H100", quantity=1)),
)
driver = flyte.TaskEnvironment(name="port_accel", depends_on=[a100, h100])


@a100.task
async def add_one(x: int) -> int:
    return x + 1


@h100.task
async def times_ten(x: int) -> int:
    return 10 * x


@driver.task
async def main(x: int) -> list[int]:
    return [await add_one(x), await times_ten(x)]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(main, x=4)
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
