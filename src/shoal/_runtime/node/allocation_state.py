"""The state of a Slurm allocation of a gang, as its program (`allocation.py`) writes it and
the Slurm engine reads it: one JSON file in the attempt's store folder, ``allocation.json``,
rewritten at every change."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from shoal._spec.names import check_node_name

STATE_FILE = "allocation.json"
# The cause of a start (`shoal._spec.call.START_CAUSES`) from why this program began it.
START_CAUSE_OF = {"first": "first_start", "failed": "restart", "requeued": "preempted",
                  "node_lost": "node_lost"}


@dataclass
class Start:
    restart: int
    at: float
    nodes: list[str]
    master: str
    port: int
    why: str  # "first" | "failed" (a restart was used) | "requeued" | "node_lost"
    uses_restart: bool = False
    exit_code: int | None = None  # the step's, once it ended
    ended_at: float | None = None
    # What srun said of nodes that ended badly, in its order: [node, what], the first one
    # before srun began ending the rest ("first": true) marked so.
    srun_says: list[dict[str, Any]] = field(default_factory=list)
    # An elastic gang's start after a node was lost: each node left out -> why.
    lost: dict[str, str] = field(default_factory=dict)
    # Why the start failed, where this program knows it better than the ranks' reports (a
    # Ray worker node that ended before the head), and that node's rank; "": read the reports.
    message: str = ""
    failed_node: int | None = None
    addresses: list[str] = field(default_factory=list)  # a Ray start's: each node's, by rank


@dataclass
class AllocationState:
    job: str
    requeues: int = 0  # SLURM_RESTART_COUNT of the job that wrote this
    restarts_used: int = 0
    phase: str = "running"  # "running" | "stopping" | "succeeded" | "failed"
    message: str = ""  # why it failed, when no rank report says it
    starts: list[Start] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # an elastic gang's nodes left out

    @property
    def restart(self) -> int:
        return self.starts[-1].restart if self.starts else -1

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> AllocationState:
        raw: dict[str, Any] = json.loads(data)
        starts = [Start(**s) for s in raw.pop("starts", [])]
        return cls(**raw, starts=starts)


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm node list (``n[1-3]``), in the allocation's order."""
    done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"scontrol show hostnames {nodelist}: {done.stderr.strip()}")
    # Shown in records and logs, passed to scontrol and srun: a name is a host name.
    return [check_node_name("scontrol show hostnames", n) for n in done.stdout.split()]
