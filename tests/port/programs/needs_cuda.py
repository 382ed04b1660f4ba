"""A clustered task that cannot run without CUDA (it asserts a device, as GPU smoke tests do),
run 2x1 where Shoal emulates the GPUs: the run fails, and its error says why."""

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, TorchRun

env = ClusteredTaskEnvironment(
    name="port_needs_cuda",
    resources=flyte.Resources(cpu=1, memory="1Gi", gpu="H100:1"),
    replicas=2,
    nproc_per_node=1,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
)


@env.task
async def smoke() -> int:
    import torch

    assert torch.cuda.is_available(), "no CUDA device visible"
    return torch.cuda.device_count()


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(smoke)
    try:
        run.wait()
    except Exception as e:  # the test reads the error the user sees
        print(f"RESULT error {e}")
    print(f"RESULT phase {run.phase}")
