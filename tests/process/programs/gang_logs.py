"""A 2-node × 2-rank gang whose ranks print and whose rank 3 raises, for `shoal logs`.

No torch.distributed: the ranks only print, so the gang starts and ends in about a second.
Run it as ``shoal run gang_logs.py shout --gate DIR``: each rank prints a first line, waits for
``DIR/go`` when a gate is given (so a test can start ``shoal logs --follow`` in between), then
prints a second line; rank 3 then raises. With ``--big N`` rank 0 also prints a line of N bytes.
"""

from __future__ import annotations

import time
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

gang_env = ClusteredTaskEnvironment(
    name="loud", resources=flyte.Resources(cpu=(1, 2), memory=("512Mi", "1Gi")),
    replicas=2, nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(max_restarts=0, collective_timeout=20, grace_period=2),
)


@gang_env.task
def shout(gate: str = "", big: int = 0) -> int:
    ctx = flyte.ctx()
    print(f"hello from rank {ctx.rank} on node {ctx.node_rank}", flush=True)
    if big and ctx.rank == 0:
        print("big:" + "x" * big, flush=True)
    if gate:
        Path(gate, f"ready{ctx.rank}").touch()
        deadline = time.monotonic() + 60
        while not Path(gate, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    print(f"late line of rank {ctx.rank}", flush=True)
    if ctx.rank == 3:
        time.sleep(1.0)  # every rank has seen the gate open and printed, however loaded
        raise ValueError("rank 3 cannot count")
    time.sleep(3.0)  # the others outlive rank 3, so the gang is stopped for its failure
    return ctx.rank
