"""Clustered tasks for the restart-in-place tests: ranks that record what they see.

This module must not import torch at its top: a rank that finds torch already imported when
its task starts was forked from the node's zygote. At import it notes the importing process
(``RIP_IMPORTS``, when set): the user's module is imported by each rank, never by the zygote.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import shoal as flyte
from shoal import _contract as contract
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

if os.environ.get("RIP_IMPORTS"):
    with open(os.environ["RIP_IMPORTS"], "a") as f:
        f.write(f"{os.environ.get(contract.NODE_RANK)}:{os.getpid()}\n")  # pids repeat per node

env = ClusteredTaskEnvironment(
    name="rip", resources=flyte.Resources(cpu=1, memory="1Gi"), replicas=2, nproc_per_node=2,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=2),
)


def _view() -> dict[str, object]:
    """What a rank's process looks like from inside, before it imports anything itself."""
    dispositions = {}
    for sig in sorted(signal.valid_signals()):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with_handler = signal.getsignal(sig)
        dispositions[signal.Signals(sig).name if sig in signal.Signals._value2member_map_
                     else str(sig)] = getattr(with_handler, "__name__", str(with_handler))
    return {
        "pid": os.getpid(), "torch_loaded": "torch" in sys.modules,
        "env": dict(os.environ), "cwd": os.getcwd(), "argv0": sys.argv[0],
        "signals": dispositions,
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "threads": threading.active_count(),
        "stdin": os.readlink("/proc/self/fd/0") if os.path.exists("/proc/self/fd/0") else "",
    }


@env.task
def record(out_dir: str, die: bool = False) -> int:
    """Every rank writes its view per restart; on the first start rank 3 kills itself (after
    every rank recorded) when ``die``."""
    view = _view()
    ctx = flyte.ctx()
    view.update(rank=ctx.rank, restart=ctx.restart_attempt, master_port=ctx.master_port,
                node=f"{ctx.node_rank}:{os.getpid()}")
    out = Path(out_dir)
    (out / f"rank{ctx.rank}-r{ctx.restart_attempt}.json").write_text(json.dumps(view))
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    dist.barrier()  # every rank has recorded its view
    if die and ctx.rank == 3 and ctx.restart_attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()
    return ctx.restart_attempt


@env.task
def hold(out_dir: str) -> int:
    """Rank 3 kills itself on the first start; on the restart every rank says it is up, then
    waits to be cancelled."""
    import time

    ctx = flyte.ctx()
    if ctx.rank == 3 and ctx.restart_attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if ctx.restart_attempt > 0:
        (Path(out_dir) / f"up-{ctx.rank}").write_text(str(os.getpid()))
    time.sleep(120)
    return ctx.restart_attempt


queued_env = ClusteredTaskEnvironment(
    name="ripq", resources=flyte.Resources(cpu=1, memory="512Mi"), replicas=2,
    nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=2),
)
solo_env = flyte.TaskEnvironment(name="ripsolo", resources=flyte.Resources(cpu=1,
                                                                           memory="256Mi"))
boss_env = flyte.TaskEnvironment(name="ripboss", resources=flyte.Resources(cpu=1),
                                 depends_on=[queued_env, solo_env])


@queued_env.task
def flaky(out_dir: str) -> int:
    """Rank 1 of the first start dies once ``solo`` has been asked for (and waits)."""
    import time

    ctx = flyte.ctx()
    if ctx.restart_attempt == 0:
        Path(out_dir, f"up-{ctx.rank}").write_text("1")
        if ctx.rank == 1:
            while not Path(out_dir, "asked").exists():
                time.sleep(0.05)
            time.sleep(1.0)  # solo is queued by now: the gang holds the whole machine
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # stopped when rank 1 dies
    return ctx.restart_attempt


@solo_env.task
def solo(out_dir: str) -> int:
    Path(out_dir, "solo-ran").write_text("1")
    return 1


@boss_env.task
async def gang_and_solo(out_dir: str) -> list[int]:
    import asyncio

    gang = asyncio.ensure_future(flaky.aio(out_dir))
    while not all(Path(out_dir, f"up-{r}").exists() for r in (0, 1)):
        await asyncio.sleep(0.05)
    Path(out_dir, "asked").write_text("1")
    return [await solo.aio(out_dir), await gang]
