"""Who logs in a gang, and under which W&B run id and group: Flyte's table, as pure functions.

``{base}`` is ``{run_name}-{action}`` of the task call; N nodes (workers) of M ranks each.

==========  ===========  =========================  =====================================
run_mode    rank_scope   who has a run              run id (group)
==========  ===========  =========================  =====================================
auto        global       global rank 0              ``{base}``
auto        worker       local rank 0 of each node  ``{base}-worker-{node}``
shared      global       every rank, one run        ``{base}``
shared      worker       every rank, a run a node   ``{base}-worker-{node}``
new         global       every rank, its own run    ``{base}-rank-{rank}`` (``{base}``)
new         worker       every rank, its own run    ``{base}-worker-{node}-rank-{local}``
                                                    (``{base}-worker-{node}``)
==========  ===========  =========================  =====================================

On one node ``worker`` is the same as ``global`` (for "auto": rank 0 only). The topology is
`shoal.ctx()`'s, so it is the same on every engine and never read from the variables torchrun
sets (a Ray gang's driver is one process: not distributed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import shoal

__all__ = ["Placement", "Topology", "distributed_info", "placement", "topology"]


@dataclass(frozen=True)
class Topology:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    worker_index: int
    num_workers: int

    @property
    def multi_node(self) -> bool:
        return self.num_workers > 1

    def as_dict(self) -> dict[str, int]:
        """Flyte's ``get_distributed_info()`` dict."""
        return {"rank": self.rank, "local_rank": self.local_rank,
                "world_size": self.world_size, "local_world_size": self.local_world_size,
                "worker_index": self.worker_index, "num_workers": self.num_workers}


def topology(context: Any = None) -> Topology | None:
    """This rank's place in its gang, from ``context`` (default `shoal.ctx()`); None outside a
    gang or in a gang of one process."""
    c = shoal.ctx() if context is None else context
    if not c or not c.world_size or c.world_size <= 1 or c.rank is None:
        return None
    local_world = c.local_world_size or c.world_size
    return Topology(rank=c.rank, local_rank=c.local_rank or 0, world_size=c.world_size,
                    local_world_size=local_world, worker_index=c.node_rank or 0,
                    num_workers=c.nnodes or max(1, c.world_size // local_world))


def distributed_info() -> dict[str, int] | None:
    """Flyte's ``get_distributed_info()``: rank, local_rank, world_size, local_world_size,
    worker_index (the node) and num_workers (the nodes) of this rank; None when not in a gang
    of several processes."""
    t = topology()
    return None if t is None else t.as_dict()


@dataclass(frozen=True)
class Placement:
    """Where one rank logs: None of it when the rank has no run (``run_id is None``)."""

    run_id: str | None
    group: str | None = None
    label: str | None = None  # shared runs: W&B's x_label of this rank's writer
    primary: bool = True  # shared runs: the writer that owns the run's state


def placement(run_mode: str, rank_scope: str, t: Topology, base: str) -> Placement:
    """The run id, group and shared-run role of the rank ``t`` for ``run_mode`` x
    ``rank_scope`` (the table above)."""
    per_worker = t.multi_node and rank_scope == "worker"
    node = f"{base}-worker-{t.worker_index}"
    if run_mode == "auto":
        holds = t.local_rank == 0 if per_worker else t.rank == 0
        return Placement(node if per_worker else base) if holds else Placement(None)
    if run_mode == "new":
        if per_worker:
            return Placement(f"{node}-rank-{t.local_rank}", group=node)
        return Placement(f"{base}-rank-{t.rank}", group=base)
    # shared: every rank writes to the one run of its scope; its first rank owns it
    label = (f"worker-{t.worker_index}-rank-{t.local_rank}" if t.multi_node
             else f"rank-{t.rank}")
    if per_worker:
        return Placement(node, label=label, primary=t.local_rank == 0)
    return Placement(base, label=label, primary=t.rank == 0)
