"""Why a start of a local gang failed, read from what its ranks and launchers left.

A start's failure names, in this order of precedence: a preemption the gang may not resume
from; a hang (`hang.py`'s diagnosis: the rank that stopped answering, its stack, not the rank
whose collective timed out first); a launcher that failed before any rank reported; a Ray
node whose raylet ended; else the rank that failed first (its report, log tail and
traceback), with a hint when it needed the GPUs this machine emulates, and the node a network
partition cut off when the ranks' reports show one (`node_net.partition`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

from shoal._engines.local.gangs import hang
from shoal._engines.local.gangs.node_net import partition
from shoal._runtime.log_files import log_tail
from shoal._runtime.observe import FirstFailure, first_failure
from shoal._storage.store import join
from shoal.errors import FailureInfo

if TYPE_CHECKING:
    from shoal._engines.local.gangs.gang import GangRunner

# A rank that needs CUDA where the engine emulates its GPUs on CPU can never pass here.
_CUDA_WORDS = re.compile(r"\bcuda\b|\bgpus?\b|\bnccl\b", re.IGNORECASE)


def mentions_cuda(first: FirstFailure) -> bool:
    """Whether a rank's failure has to do with its GPUs: its message, or the last frames of
    its traceback (``rank % torch.cuda.device_count()`` fails as a ZeroDivisionError)."""
    return bool(_CUDA_WORDS.search(first.message)
                or _CUDA_WORDS.search("\n".join(first.traceback.splitlines()[-8:])))


EMULATED_GPU_HINT = (" (this task's GPUs were emulated on CPU: this machine has fewer than it "
                     "asks for, so torch.cuda.is_available() is False in its ranks; run it "
                     "where it gets real GPUs, e.g. --engine kubernetes, or guard its CUDA "
                     "calls with torch.cuda.is_available())")


def start_failure(runner: GangRunner, restart: int, preempted: bool) -> FailureInfo:
    """Why start ``restart`` of ``runner``'s gang failed, from what its ranks left: a
    preemption, a hang (naming the rank that stopped answering), a lost Ray node, the rank
    that failed first (a partition's node when the ranks' reports show one), or a launcher's
    failure."""
    first = first_failure(runner.store, join(runner.io, f"r{restart}"))  # read once
    failure = _failure_of(runner, restart, preempted, first)
    cut = partition(first.reports, runner.nets) if first is not None else None
    if cut is None:
        return failure
    # A partition explains the timeouts of every rank: the failure names the node that
    # is cut off, not the rank whose timeout fired first.
    message, rank, node = cut
    return dataclasses.replace(failure, message=f"{message}. {failure.message}",
                               rank=rank, node=node)


def _failure_of(runner: GangRunner, restart: int, preempted: bool,
                first: FirstFailure | None) -> FailureInfo:
    task, ref = runner.call.task.name, runner.ref
    log_dir = runner.start_dir(restart)
    if preempted:
        return FailureInfo(task=task, action=ref.action, attempt=ref.attempt, kind="crash",
                           message=f"the gang was preempted (restart {restart}) and "
                           "resume_after_preemption is off")
    hung = runner.diagnosis
    if hung is not None and hung.reason == "no_progress":
        return _hang_failure(runner, hung, restart, log_dir, None)
    if first is None:
        tails = [log_tail(p, 15) for p in sorted(log_dir.glob("node*.log"))]
        return FailureInfo(task=task, action=ref.action, attempt=ref.attempt, kind="crash",
                           message=f"a node launcher failed (restart {restart})",
                           log_tail="\n".join(t for t in tails if t))
    if hung is not None and hung.verdict.culprits:
        return _hang_failure(runner, hung, restart, log_dir, first)
    if first.process == "raylet" and first.node is not None:
        return runner.lost_ray_node(first, restart, log_dir)
    rank = first.rank
    tail = log_tail(log_dir / f"rank{rank}.log") if rank is not None else ""
    message = f"rank {rank} failed first (restart {restart}): {first.message}"
    if runner.engine.gpus_emulated(runner.call.task.env) and mentions_cuda(first):
        message += EMULATED_GPU_HINT
    if hung is not None:
        message = (f"hang: {hung.verdict.summary()} (stacks: {hung.report_path}). "
                   f"{message}")
    return FailureInfo(
        task=task, action=ref.action, attempt=ref.attempt,
        kind="user" if first.raised else "crash",
        message=message,
        exit_code=first.exit_code, signal=first.signal, rank=rank, node=first.node,
        log_tail=tail, traceback=first.traceback, error_type=first.error_type,
    )


def _hang_failure(runner: GangRunner, hung: hang.Diagnosis, restart: int, log_dir: Path,
                  first: FirstFailure | None) -> FailureInfo:
    """The failure names the rank that stopped answering (its stack as the traceback,
    its log's tail), not the rank whose collective timed out first."""
    culprit = hung.culprit()
    if first is None:
        what = (f"the gang made no progress for {runner.cluster.progress_timeout:g} s (no "
                f"rank's step advanced; restart {restart})")
    else:
        what = (f"a collective timed out (restart {restart}; rank {first.rank} failed "
                f"first: {first.message})")
    traceback = hung.stack_text(culprit) if culprit is not None else ""
    if first is not None and first.traceback:
        traceback += f"\nrank {first.rank} failed first:\n{first.traceback}"
    rank = culprit.rank if culprit is not None else None
    return FailureInfo(
        task=runner.call.task.name, action=runner.ref.action, attempt=runner.ref.attempt,
        kind="timeout" if first is None else "user" if first.raised else "crash",
        message=f"hang: {hung.verdict.summary()}. {what[0].upper()}{what[1:]}. Stacks "
                f"of every rank: {hung.report_path}",
        rank=rank, node=culprit.node if culprit is not None else None,
        log_tail=log_tail(log_dir / f"rank{rank}.log") if rank is not None else "",
        traceback=traceback, error_type=first.error_type if first is not None else "",
    )
