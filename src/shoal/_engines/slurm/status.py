"""How a Slurm attempt ended, as pure functions of what was read: Slurm's view of the job
(`client.JobInfo`), the allocation's own state
(`shoal._runtime.node.allocation_state.AllocationState`), the ranks' and nodes' first failure,
the node states and the log tails. The engine (`engine.SlurmJob`) reads those; these decide, so
every ending can be tested by value.

    allocation phase "succeeded"  ─► the output of start r<k> (read by the engine)
    allocation phase "failed"     ─► its message, else the first failure of its last start:
                                      a node that ended first with no report (`ended_silently`)
                                      or the rank that failed first (`rank_failed`)
    no allocation end             ─► Slurm's end state (`ended_by_slurm`): lost node, time
                                      limit, out of memory, scancel
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal._engines.slurm.client import REQUEUABLE, JobInfo
from shoal._runtime.node import AllocationState, Start
from shoal._runtime.observe import FirstFailure
from shoal.errors import FailureInfo

# Node states that mean a node is gone (sinfo's long names; a trailing * is "not responding").
LOST = ("down", "fail", "failing", "drain", "drained", "draining", "unknown", "not_responding")


@dataclass(frozen=True)
class Attempt:
    """Which attempt a failure is of, and its Slurm job."""

    task: str
    action: str
    attempt: int
    job: str

    def failure(self, kind: str, message: str, **more: Any) -> FailureInfo:
        return FailureInfo(task=self.task, action=self.action, attempt=self.attempt,
                           kind=kind, message=message, **more)


def lost_nodes(states: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """The nodes of ``states`` (name -> (state, reason), as sinfo says) that are gone: name ->
    its state and reason."""
    return {n: f"{s}: {r}" if r and r != "none" else s for n, (s, r) in states.items()
            if s.lower().rstrip("*+~#").startswith(LOST) or s.endswith("*")}


def requeue_pending(info: JobInfo | None) -> bool:
    """Slurm shows a requeueable job as PREEMPTED or NODE_FAIL for a moment before it requeues
    it: not yet its end."""
    return (info is not None and info.state in REQUEUABLE
            and info.fields.get("Requeue") == "1")


def end_kind(info: JobInfo | None) -> str:
    """The failure kind of a job Slurm ended: its time limit, its memory, anything else."""
    if info is not None and info.state in ("TIMEOUT", "DEADLINE"):
        return "timeout"
    if info is not None and info.state == "OUT_OF_MEMORY":
        return "oom"
    return "crash"


def ended_by_slurm(who: Attempt, info: JobInfo | None, lost: Mapping[str, str],
                   log_tail: str) -> FailureInfo:
    """The job ended without the allocation saying how: what Slurm says (``info``; None when
    it no longer knows the job) and which of its nodes are gone."""
    if info is None:
        what = f"Slurm forgot job {who.job} before its end was read"
    else:
        what = (f"Slurm ended job {who.job} as {info.state} (reason {info.reason}, exit "
                f"code {info.exit_code})")
    if lost:
        what += "; lost node(s): " + ", ".join(f"{n} ({r})" for n, r in lost.items())
    return who.failure(end_kind(info), what, log_tail=log_tail)


def silent_node(start: Start, first: FirstFailure | None) -> tuple[int, dict[str, Any]] | None:
    """The node srun saw end first, when it left no report of its own (its node rank and what
    srun said), else None."""
    said = next((s for s in start.srun_says if s.get("first")), None)
    if said is None or said["node"] not in start.nodes:
        return None
    node = start.nodes.index(said["node"])
    reported = {r.get("node") for r in (first.reports if first is not None else [])}
    return None if node in reported else (node, said)


def ended_silently(who: Attempt, start: Start, node: int, said: Mapping[str, Any],
                   lost: Mapping[str, str], first: FirstFailure | None,
                   log_tail: str) -> FailureInfo:
    """A node that ended first and left no report (`silent_node`): its launcher was killed
    with everything on it, as when its machine is lost. Other nodes' ranks then fail on the
    missing peer; they are not the cause."""
    host = said["node"]
    message = f"node {host} (node rank {node}) ended first and left no report (srun: " \
              f"{said['what']})"
    message += (f"; Slurm marks it {lost[host]}" if host in lost else
                ": its machine was likely lost, or its launcher killed")
    message += f" (restart {start.restart}, Slurm job {who.job})"
    if first is not None:
        message += f"; then rank {first.rank} failed: {first.message}"
    return who.failure("crash", message, node=node, log_tail=log_tail)


def said_by_allocation(who: Attempt, start: Start, first: FirstFailure | None,
                       log_tail: str) -> FailureInfo:
    """A start whose cause the allocation program saw itself (``start.message``: a Ray
    worker node that ended before the head), with what that node's launcher reported."""
    message = start.message
    if first is not None and first.node == start.failed_node:
        message += f"; its launcher said: {first.message}"
    return who.failure("crash", message, node=start.failed_node, log_tail=log_tail)


def launcher_failed(who: Attempt, start: Start, log_tail: str) -> FailureInfo:
    """A start that failed with no rank's report: a node launcher itself failed."""
    return who.failure("crash", f"a node launcher failed (restart {start.restart}, Slurm job "
                       f"{who.job}, nodes {','.join(start.nodes)}; exit code "
                       f"{start.exit_code})", log_tail=log_tail)


def rank_failed(who: Attempt, start: Start, first: FirstFailure, log_tail: str) -> FailureInfo:
    """The rank that failed first in ``start``: a user error when it raised, else a crash."""
    rank, node = first.rank, first.node
    host = start.nodes[node] if node is not None and node < len(start.nodes) else "?"
    how = first.message
    if not first.raised and (first.signal or first.exit_code is not None):
        how += f" ({first.signal or f'exit code {first.exit_code}'})"
    return who.failure(
        "user" if first.raised else "crash",
        f"rank {rank} on node {host} failed first (restart {start.restart}, Slurm job "
        f"{who.job}): {how}",
        exit_code=first.exit_code, signal=first.signal, rank=rank, node=node,
        log_tail=log_tail, traceback=first.traceback, error_type=first.error_type)


def allocation_end(state: AllocationState | None) -> str:
    """What the allocation says of its end: "succeeded" (its last start's rank 0 wrote the
    output), "message" (it failed and says why), "start" (its last start failed: look at who
    failed first), or "slurm" (it said nothing: Slurm's end state tells)."""
    if state is not None and state.phase == "succeeded":
        return "succeeded"
    if state is not None and state.phase == "failed" and state.starts:
        return "message" if state.message else "start"
    return "slurm"
