"""`slurm.status`: how a Slurm attempt ended, decided from values (Slurm's view of the job,
the allocation's state, the first failure, the node states); no Slurm runs here."""

from __future__ import annotations

from typing import Any

from shoal._engines.slurm import status
from shoal._engines.slurm.client import JobInfo, parse_node_states
from shoal._runtime.node.allocation_state import AllocationState, Start
from shoal._runtime.observe.reports import FirstFailure
from shoal.errors import FailureInfo

WHO = status.Attempt(task="train", action="a0.1", attempt=2, job="17")


def job(state: str, **fields: str) -> JobInfo:
    return JobInfo(id="17", state=state, reason="None", restarts=0, nodes="n[1-2]",
                   exit_code="0:9", fields=fields)


def start(**over: Any) -> Start:
    values: dict[str, Any] = {"restart": 1, "at": 0.0, "nodes": ["n1", "n2"], "master": "n1",
                              "port": 29500, "why": "failed", "exit_code": 1}
    return Start(**{**values, **over})


def test_an_allocation_says_how_it_ended_before_slurm_does() -> None:
    assert status.allocation_end(None) == "slurm"
    assert status.allocation_end(AllocationState(job="17", phase="running")) == "slurm"
    assert status.allocation_end(AllocationState(job="17", phase="succeeded")) == "succeeded"
    failed = AllocationState(job="17", phase="failed", starts=[start()])
    assert status.allocation_end(failed) == "start"
    failed.message = "no node could start"
    assert status.allocation_end(failed) == "message"
    # failed before any start: nothing of its own to read, Slurm's end tells
    assert status.allocation_end(AllocationState(job="17", phase="failed")) == "slurm"


def test_slurms_end_state_is_the_failure_kind() -> None:
    assert [status.end_kind(job(s)) for s in ("TIMEOUT", "DEADLINE", "OUT_OF_MEMORY",
                                              "NODE_FAIL", "CANCELLED")] == \
        ["timeout", "timeout", "oom", "crash", "crash"]
    assert status.end_kind(None) == "crash"


def test_a_job_slurm_ended_names_its_state_and_its_lost_nodes() -> None:
    failure = status.ended_by_slurm(WHO, job("NODE_FAIL"), {"n2": "down: Not responding"},
                                    "tail")
    assert failure == FailureInfo(
        task="train", action="a0.1", attempt=2, kind="crash", log_tail="tail",
        message="Slurm ended job 17 as NODE_FAIL (reason None, exit code 0:9); lost node(s): "
                "n2 (down: Not responding)")
    assert status.ended_by_slurm(WHO, None, {}, "").message == \
        "Slurm forgot job 17 before its end was read"
    assert status.ended_by_slurm(WHO, job("TIMEOUT"), {}, "").kind == "timeout"


def test_a_requeueable_end_is_waited_for_only_when_slurm_will_requeue() -> None:
    assert status.requeue_pending(job("PREEMPTED", Requeue="1"))
    assert status.requeue_pending(job("NODE_FAIL", Requeue="1"))
    assert not status.requeue_pending(job("NODE_FAIL", Requeue="0"))
    assert not status.requeue_pending(job("FAILED", Requeue="1"))
    assert not status.requeue_pending(None)


def test_lost_nodes_are_the_down_drained_and_not_responding_ones() -> None:
    states = {"n1": ("idle", "none"), "n2": ("down*", "Not responding"),
              "n3": ("drained", "maintenance"), "n4": ("mixed*", ""), "n5": ("allocated", "")}
    assert status.lost_nodes(states) == {"n2": "down*: Not responding",
                                         "n3": "drained: maintenance", "n4": "mixed*"}


def test_sinfo_of_1024_nodes_is_read_and_the_lost_one_named() -> None:
    text = "".join(f"n{i:04d}|allocated|none\n" for i in range(1, 1025))
    text = text.replace("n0777|allocated|none", "n0777|down*|Not responding")
    states = parse_node_states(text + "a line sinfo would not print\n")
    assert len(states) == 1024 and states["n1024"] == ("allocated", "none")
    assert status.lost_nodes(states) == {"n0777": "down*: Not responding"}


def test_the_rank_that_failed_first_is_named_with_its_node() -> None:
    raised = FirstFailure(rank=3, node=1, message="ValueError: bad", raised=True,
                          traceback="tb", error_type="ValueError")
    failure = status.rank_failed(WHO, start(), raised, "rank 3 log")
    assert failure == FailureInfo(
        task="train", action="a0.1", attempt=2, kind="user",
        message="rank 3 on node n2 failed first (restart 1, Slurm job 17): ValueError: bad",
        rank=3, node=1, log_tail="rank 3 log", traceback="tb", error_type="ValueError")
    killed = FirstFailure(rank=0, node=None, message="the process was killed", raised=False,
                          signal="SIGKILL")
    failure = status.rank_failed(WHO, start(), killed, "")
    assert failure.kind == "crash" and failure.message == (
        "rank 0 on node ? failed first (restart 1, Slurm job 17): the process was killed "
        "(SIGKILL)")


def test_a_node_that_ended_first_without_a_report_is_the_cause() -> None:
    s = start(srun_says=[{"node": "n2", "what": "exited with 137", "first": True}])
    peer = FirstFailure(rank=0, node=0, message="peer gone", raised=False,
                        reports=[{"node": 0}])
    assert status.silent_node(s, peer) == (1, s.srun_says[0])
    failure = status.ended_silently(WHO, s, 1, s.srun_says[0], {}, peer, "node log")
    assert failure == FailureInfo(
        task="train", action="a0.1", attempt=2, kind="crash", node=1, log_tail="node log",
        message="node n2 (node rank 1) ended first and left no report (srun: exited with "
                "137): its machine was likely lost, or its launcher killed (restart 1, Slurm "
                "job 17); then rank 0 failed: peer gone")
    lost = status.ended_silently(WHO, s, 1, s.srun_says[0], {"n2": "down"}, None, "")
    assert "; Slurm marks it down (restart 1" in lost.message
    # the node reported itself, or srun named no first node: not silent
    assert status.silent_node(s, FirstFailure(rank=2, node=1, message="m", raised=True,
                                              reports=[{"node": 1}])) is None
    assert status.silent_node(start(), None) is None


def test_a_start_without_any_report_is_a_launcher_failure() -> None:
    failure = status.launcher_failed(WHO, start(), "tails")
    assert failure.kind == "crash" and failure.log_tail == "tails"
    assert failure.message == ("a node launcher failed (restart 1, Slurm job 17, nodes n1,n2; "
                               "exit code 1)")
