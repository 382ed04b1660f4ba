"""The node launcher records its ranks live once one has waited in a collective for the early
share of the timeout, without the engine asking (Slurm and Kubernetes nodes have no engine
watching).

Each test runs the node's watch in a thread that ends with the test (`Node.ended`), and
synchronises on the watch's looks at the ranks' status, not on a fixed time."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shoal._contract import NodeEnv
from shoal._runtime.node import hang
from shoal._runtime.node.launcher import Node
from shoal._runtime.node.rank_status import status_path
from tests.helpers import wait_until


def _node(tmp_path: Path, timeout: float) -> NodeEnv:
    return NodeEnv(home="/h", store="file:///s", run="r", action="a0", attempt=0, env_name="e",
                   code_file="f.py", task="t", io="file:///s/io", node_rank=1, nnodes=2,
                   nproc_per_node=2, master_addr="127.0.0.1", master_port=1, restart_attempt=0,
                   rank_log_dir=str(tmp_path), collective_timeout=timeout)


def _status(tmp_path: Path, rank: int, since: float | None) -> None:
    status_path(tmp_path, rank).write_text(json.dumps(
        {"rank": rank, "step": 3, "step_at": time.time(), "collective": "all_reduce" if since
         else None, "collective_since": since}))


@contextmanager
def _watching(runner: Node, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """The runner's `watch_collectives` in a thread for the block, ended and joined after it.
    Yields ``looks(n)``, which returns once the watch has made ``n`` more whole looks at the
    ranks' status (a look began after them, so each, diagnosis included, is done)."""
    began = [0]
    real = hang.waiting_since

    def counted(node: NodeEnv) -> float | None:
        began[0] += 1
        return real(node)

    monkeypatch.setattr(hang, "waiting_since", counted)

    def looks(n: int) -> None:
        target = began[0] + n + 1
        wait_until(f"{n} looks of the watch at the ranks' status", lambda: began[0] >= target,
                   timeout=60)

    thread = threading.Thread(target=runner.watch_collectives, name="test-watch-collectives")
    thread.start()
    try:
        yield looks
    finally:
        runner.ended.set()
        thread.join(10)
        assert not thread.is_alive(), "the watch did not end once asked"


def test_early_share_of_the_timeout() -> None:
    assert hang.early_at(60) == 55  # 5 s before the end
    assert hang.early_at(6) == 3  # a short timeout: at its half


@pytest.mark.parametrize("waited", [True, False])
def test_a_rank_waiting_past_the_early_share_is_recorded_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waited: bool) -> None:
    monkeypatch.setattr(hang, "POLL", 0.05)
    runner = Node(_node(tmp_path, timeout=4.0))
    runner.children = {101: 0, 102: 1}
    since = time.time() - (2.5 if waited else 0.5)  # early_at(4) = 2
    _status(tmp_path, 2, None)  # rank 2 (this node's first) is between collectives
    _status(tmp_path, 3, since)
    _status(tmp_path, 1, time.time() - 100)  # another node's rank: not this node's business
    calls: list[float] = []

    def diagnose(*, why: str) -> bool:
        assert "a rank has waited" in why
        calls.append(time.time())
        return True

    monkeypatch.setattr(runner, "diagnose", diagnose)
    with _watching(runner, monkeypatch) as looks:
        looks(10)
        assert len(calls) == (1 if waited else 0)  # once per collective, not at every look


def test_a_report_not_written_is_tried_again_while_the_ranks_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first try is skipped (another report was being written) or fails: the next poll
    # tries again, and stops once one is written.
    monkeypatch.setattr(hang, "POLL", 0.05)
    runner = Node(_node(tmp_path, timeout=4.0))
    runner.children = {101: 0, 102: 1}
    _status(tmp_path, 2, time.time() - 2.5)
    _status(tmp_path, 3, None)
    answers = [False, False, True]
    calls: list[bool] = []

    def diagnose(*, why: str) -> bool:
        calls.append(answers[len(calls)] if len(calls) < len(answers) else True)
        return calls[-1]

    monkeypatch.setattr(runner, "diagnose", diagnose)
    with _watching(runner, monkeypatch) as looks:
        wait_until("three tries at a report", lambda: len(calls) >= 3)
        looks(5)
        assert calls == [False, False, True]


def test_a_wait_past_the_timeout_is_not_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hang, "POLL", 0.05)
    runner = Node(_node(tmp_path, timeout=4.0))
    runner.children = {101: 0, 102: 1}
    _status(tmp_path, 2, time.time() - 4.5)  # its rank will fail soon: no report at each poll
    _status(tmp_path, 3, None)
    calls: list[str] = []
    monkeypatch.setattr(runner, "diagnose", lambda *, why: calls.append(why) is not None)
    with _watching(runner, monkeypatch) as looks:
        looks(10)
        assert len(calls) == 1


def test_the_next_waiter_of_a_recorded_wait_is_not_recorded_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both ranks wait; the node is recorded; the longest waiter then fails (its status no
    # longer shows the collective) and the other's slightly later start is the node's wait
    # now. That is the wait already recorded: a second report would see the failed rank dead
    # and replace the live one.
    monkeypatch.setattr(hang, "POLL", 0.05)
    runner = Node(_node(tmp_path, timeout=4.0))
    runner.children = {101: 0, 102: 1}
    since = time.time() - 2.5
    _status(tmp_path, 2, since)
    _status(tmp_path, 3, since + 0.01)
    calls: list[str] = []
    monkeypatch.setattr(runner, "diagnose", lambda *, why: calls.append(why) is None)
    with _watching(runner, monkeypatch) as looks:
        looks(5)
        assert len(calls) == 1
        _status(tmp_path, 2, None)  # rank 2 timed out and left the collective
        looks(5)
        assert len(calls) == 1, calls
