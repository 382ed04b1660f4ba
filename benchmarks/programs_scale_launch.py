"""A gang of trivial ranks for ``scale_engines.py``'s launch section: each rank notes the
wall-clock time its body started (its first line) in ``<marks>/rank<N>``, and returns. No
torch: the rank body needs none (run it with ``SHOAL_PREIMPORT=0`` so the node launchers do
not import it either). Sized from the command line:

    shoal run benchmarks/programs_scale_launch.py hello --marks DIR \\
        --override scale.replicas=8 --override scale.nproc_per_node=8
"""

from __future__ import annotations

import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

scale = ClusteredTaskEnvironment(
    name="scale", replicas=1, nproc_per_node=8,
    failure_policy=ClusterFailurePolicy(max_restarts=0, collective_timeout=120),
)


@scale.task
def hello(marks: str) -> int:
    started = time.time()
    rank = shoal.ctx().rank
    (Path(marks) / f"rank{rank}").write_text(f"{started:.6f}\n")
    return rank
