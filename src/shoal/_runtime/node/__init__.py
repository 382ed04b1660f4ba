"""One node of a gang, on any engine: the node launcher (`launcher.py`, ``shoal-node``), how
it starts its ranks (`rank_start.py`: the zygote of `zygote.py`, torchrun's forking agent of
`torchrun_agent.py`, or ranks exec'd under nsys by `nsys_rank.py`), one rank (`rank.py`) with
its collective wrappers and status file (`rank_status.py`) and reachability probe
(`reach.py`), the launcher's control socket (`node_control.py`), its per-rank samples
(`node_sampler.py`) and hang diagnosis (`hang.py`), a Ray node (`ray_node.py`) and a KubeRay
RayJob's driver (`ray_job.py`), and a Slurm allocation's program (`allocation.py`) with the
state it writes (`allocation_state.py`).

This module is the package's one door: the rest of Shoal imports the names in ``__all__``,
never a module inside (`tests/unit/test_layers.py`). The door leaves out the ``-m`` entry
points (launcher, rank, zygote, torchrun_agent, nsys_rank, ray_job, allocation): importing one
here would import it once more before ``runpy`` runs it as ``__main__``.
"""

from shoal._runtime.node.allocation_state import (
    START_CAUSE_OF,
    STATE_FILE,
    AllocationState,
    Start,
    hostnames,
)
from shoal._runtime.node.hang import HANG_SIGNAL, node_report_name, timed_out
from shoal._runtime.node.rank_status import read_status, wrap_collectives
from shoal._runtime.node.ray_node import (
    CLUSTER_FILE,
    cluster_info,
    cluster_temp_dir,
    sweep_dead_clusters,
)

__all__ = [
    "CLUSTER_FILE",
    "HANG_SIGNAL",
    "START_CAUSE_OF",
    "STATE_FILE",
    "AllocationState",
    "Start",
    "cluster_info",
    "cluster_temp_dir",
    "hostnames",
    "node_report_name",
    "read_status",
    "sweep_dead_clusters",
    "timed_out",
    "wrap_collectives",
]
