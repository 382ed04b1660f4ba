"""Who stopped answering: the verdict of a hang diagnosis on made-up per-rank data."""

from __future__ import annotations

import datetime as dt

import pytest

from shoal._runtime.observe.hang_verdict import RankView, decide, innermost_frame, rank_views
from shoal.clustered import ClusterFailurePolicy
from shoal.errors import SpecError

PY_SPY = """Process 4: python -m shoal._runtime.node.launcher
Thread 4 (idle): "MainThread"
    stuck_in_sleep (prog.py:28)
    _train (prog.py:47)
Thread 6 (idle): "shoal-metrics"
    Event.wait (threading.py:629)
"""
FAULTHANDLER = """Thread 0x00007f01 (most recent call first):
  File "/x/threading.py", line 331 in wait

Current thread 0x00007f00 (most recent call first):
  File "/x/prog.py", line 28 in stuck_in_sleep
  File "/x/prog.py", line 47 in _train
"""


def _waiting(rank: int, step: int = 5, collective: str = "all_reduce", waited: float = 20.0,
             state: str = "sleeping", timed_out: bool = False) -> RankView:
    return RankView(rank=rank, state=state, step=step, collective=collective, waited=waited,
                    timed_out=timed_out)


def test_a_stopped_rank_is_named_and_the_others_wait() -> None:
    views = [_waiting(0, timed_out=True, state="exited"), _waiting(1),
             RankView(rank=2, state="stopped", step=5), _waiting(3)]
    v = decide(views)
    assert list(v.culprits) == [2] and "stopped (SIGSTOP" in v.culprits[2]
    assert "last step 5" in v.culprits[2]
    assert v.waiting == {0: "timed out waiting in all_reduce for 20 s",
                         1: "waiting in all_reduce for 20 s", 3: "waiting in all_reduce for 20 s"}
    assert v.summary().startswith("rank 2 stopped answering (its process is stopped")
    assert "rank 0 timed out waiting in all_reduce for 20 s" in v.summary()
    assert "ranks 1, 3 waiting in all_reduce for 20 s" in v.summary()


def test_a_rank_outside_the_collective_is_named_with_where_it_is() -> None:
    views = [_waiting(0), RankView(rank=1, state="sleeping", step=5, stack=PY_SPY)]
    v = decide(views)
    assert list(v.culprits) == [1]
    assert v.culprits[1] == ("not in all_reduce, where the others wait; it is in "
                             "stuck_in_sleep (prog.py:28); last step 5")


def test_a_zombie_is_named_unless_it_timed_out_itself() -> None:
    views = [_waiting(0, state="zombie", timed_out=True), RankView(rank=1, state="zombie",
                                                                   step=2)]
    assert list(decide(views).culprits) == [1]


def test_a_rank_in_another_collective_is_named() -> None:
    views = [_waiting(0), _waiting(1), _waiting(2, collective="broadcast")]
    v = decide(views)
    assert v.culprits == {2: "in broadcast while the others wait in all_reduce"}


def test_without_collectives_the_rank_behind_is_named() -> None:
    views = [RankView(rank=0, state="running", step=9), RankView(rank=1, state="running", step=4),
             RankView(rank=2, state="running", step=9)]
    assert decide(views).culprits == {1: "behind: last step 4, the others reached 9"}


def test_when_no_rank_stands_out_the_verdict_says_so() -> None:
    v = decide([_waiting(0), _waiting(1)])
    assert not v.culprits
    assert v.summary().startswith("no rank stands out: every rank waits in all_reduce")


def test_ranks_that_report_no_steps_are_not_judged_on_steps() -> None:
    views = [RankView(rank=0, state="running"), RankView(rank=1, state="running", step=3)]
    assert not decide(views).culprits


def test_innermost_frame_of_the_main_thread() -> None:
    assert innermost_frame(PY_SPY) == "stuck_in_sleep (prog.py:28)"
    assert innermost_frame(FAULTHANDLER) == "stuck_in_sleep (/x/prog.py:28)"
    assert innermost_frame("") == ""


def test_views_from_node_reports_status_files_and_failures() -> None:
    """Rank 0 timed out (its node had stopped: status file and failure report only); rank 1
    was seen live by its launcher, stopped."""
    node1 = {"node": 1, "ranks": [{"rank": 1, "node": 1, "pid": 7, "state": "stopped",
                                   "status": {"step": 3, "collective": None}, "stack": "",
                                   "stack_note": "cannot run faulthandler"}]}
    statuses = {0: {"step": 3, "collective": "all_reduce", "collective_since": 100.0}}
    failures = [{"kind": "rank", "rank": 0, "collective_timeout": True, "traceback": "Tb",
                 "collective": {"name": "all_reduce", "since": 100.0, "failed_at": 106.0}},
                {"kind": "node", "rank": 0, "signal": None}]
    views = rank_views(2, [node1], statuses, failures, now=110.0)
    assert views[0] == RankView(rank=0, state="exited", step=3, collective="all_reduce",
                                waited=6.0, timed_out=True,
                                stack="(the rank had failed; its traceback:)\nTb")
    assert views[1].state == "stopped" and views[1].step == 3 and views[1].node == 1
    assert views[1].stack_note == "cannot run faulthandler"
    assert list(decide(views).culprits) == [1]


def test_progress_timeout_is_validated() -> None:
    assert ClusterFailurePolicy().progress_timeout is None
    assert ClusterFailurePolicy(progress_timeout=dt.timedelta(minutes=2)).progress_timeout == 120
    for bad in (0, -1, "10", True):
        with pytest.raises(SpecError, match="progress_timeout"):
            ClusterFailurePolicy(progress_timeout=bad)  # type: ignore[arg-type]


def test_a_collective_timeout_is_told_from_a_failure_report_or_an_abort_in_a_collective() -> None:
    """gloo raises (the report says so); NCCL's watchdog aborts the process (SIGABRT) once a
    collective ran for the timeout: only the status file shows that it was in one."""
    from shoal._runtime.node.hang import timed_out

    assert timed_out({"collective_timeout": True}, None, 1, 30, now=0)
    in_it = {"collective": "all_reduce", "collective_since": 100.0}
    assert timed_out({}, in_it, -6, 30, now=129.0)  # SIGABRT after ~the timeout
    assert not timed_out({}, in_it, -6, 30, now=110.0)  # aborted early: another cause
    assert not timed_out({}, in_it, 1, 30, now=200.0)  # exited: not NCCL's watchdog
    assert not timed_out({}, {"collective": None}, -6, 30, now=200.0)
