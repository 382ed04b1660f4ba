"""Nsight Systems on tasks, the way Flyte's nsight plugin examples do it: ``@nsys_profile``
above ``@env.task``; a sync task that captures two ``nsys.range`` regions by hand; an async
task captured whole, keeping only its stats; a DDP gang of 2 ranks profiled on rank 0 only;
``nvtx.range`` labels throughout (torch is a CPU build here, where NVTX does not exist). The
GPU work of Flyte's examples is a small CPU loop. Needs ``nsys`` on PATH: the test puts a
stand-in there."""

import asyncio

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment
from shoal.plugins.nsight import nsys, nsys_profile, nvtx, under_nsys

env = flyte.TaskEnvironment(
    name="port_nsight",
    image=flyte.Image.from_debian_base().with_local_v2_plugins(["flyteplugins-nsight"]),
    resources=flyte.Resources(cpu=1, memory="1Gi"),
    pod_template=flyte.PodTemplate().allow_nested_sandboxing(),
)
gang = ClusteredTaskEnvironment(name="port_nsight_ddp", replicas=1, nproc_per_node=2)
driver = flyte.TaskEnvironment(name="port_nsight_driver", depends_on=[env, gang])


@nsys_profile(capture="manual", trace=["cuda", "nvtx", "osrt"])
@env.task
def regions(steps: int) -> str:
    total = sum(range(1000))  # set-up: outside every region, so in no report
    with nsys.range("training"):
        for step in range(steps):
            with nvtx.range(f"step_{step}"):
                total += step
    with nsys.range("evaluation"):
        total *= 2
    return f"regions total={total} under_nsys={under_nsys()}"


@nsys_profile(reports=["cuda_api_sum"], attach_report=False)
@env.task
async def whole(x: int) -> int:
    with nvtx.range("whole"):
        return x + 1


@nsys_profile(trace=["cuda", "nvtx"])
@gang.task
def ddp(steps: int) -> str:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    x = torch.ones(4) * (dist.get_rank() + 1)
    for step in range(steps):
        with nvtx.range(f"step_{step}"):
            dist.all_reduce(x)
    dist.destroy_process_group()
    return f"ddp sum={int(x[0])} rank0_under_nsys={under_nsys()}"


@driver.task
async def main(steps: int) -> str:
    a, b, c = await asyncio.gather(regions.aio(steps), whole(41), ddp.aio(steps))
    return f"{a} | whole={b} | {c}"


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(main, steps=3)
    run.wait()
    print(f"RESULT run {run.name}")
    print(f"RESULT outputs {run.outputs()}")
