"""The gang of the restart-race test: its nodes are `reset_launcher` stand-ins, so the task
body never runs (the stand-in writes its output)."""

from __future__ import annotations

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

env = ClusteredTaskEnvironment(
    name="reset-race", resources=shoal.Resources(cpu=1, memory="256Mi"), replicas=2,
    nproc_per_node=1, failure_policy=ClusterFailurePolicy(max_restarts=1, grace_period=1),
)


@env.task
def seven() -> int:
    raise AssertionError("the stand-in launchers never run a rank")
