"""`Timeout(deadline=...)` on real task processes: the deadline stops a retried task before its
retries run out, in about the deadline's time, as a timeout naming the deadline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from shoal.errors import TaskTimeout

from .programs import deadline_tasks as p

pytestmark = pytest.mark.slow


def _attempts(run: str) -> list[str]:
    with Records(contract.home() / "shoal.db") as records:
        return [a.state for a in records.list_attempts(run, "a0")]


def test_the_deadline_stops_a_hanging_task_before_its_retries_run_out() -> None:
    t0 = time.monotonic()
    run = shoal.run(p.hangs)
    with pytest.raises(TaskTimeout) as err:
        run.wait()
    took = time.monotonic() - t0
    assert 2.5 <= took < 6.0, took  # the deadline, not 6 attempts of max_runtime=1s
    assert "ran past its deadline of 2.5s" in str(err.value)
    states = _attempts(run.name)
    assert 2 <= len(states) < 6 and set(states) == {"failed"}, states


def test_a_pause_before_a_retry_ends_at_the_deadline() -> None:
    t0 = time.monotonic()
    run = shoal.run(p.fails)
    with pytest.raises(TaskTimeout) as err:
        run.wait()
    assert 1.5 <= time.monotonic() - t0 < 4.0  # not the 10 s backoff
    assert "in attempt 0; 4 retries were not used" in str(err.value)
    assert _attempts(run.name) == ["failed"]


def test_a_call_within_its_deadline_succeeds() -> None:
    assert shoal.run(p.quick).outputs()[0] == 7


def test_a_gang_past_its_deadline_is_stopped_by_the_controller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The local gang does not bound its own attempts: the controller's backstop stops it.
    monkeypatch.setattr("shoal._driver.deadline.BACKSTOP", 0.5)
    t0, until = time.monotonic(), time.time() + 12.5
    run = shoal.run(p.gang_hangs, str(tmp_path), until)
    with pytest.raises(TaskTimeout, match=r"ran past its deadline of 9s.*3 retries were not"):
        run.wait()
    took = time.monotonic() - t0
    assert 9.0 <= took < 12.0, took  # the deadline and the backstop, not the ranks' hang
    assert len(list(tmp_path.glob("rank*-started"))) == 2
    time.sleep(max(0.0, until + 0.5 - time.time()))
    assert not list(tmp_path.glob("rank*-woke")), "a rank outlived the deadline"


def test_a_gang_past_its_deadline_while_its_nodes_import_ends_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cancelled while the node's zygote still imports torch (~1-3 s): the launchers are ended
    # then, not once their imports are done, and no rank starts.
    monkeypatch.setattr("shoal._driver.deadline.BACKSTOP", 0.2)
    t0 = time.monotonic()
    run = shoal.run(p.gang_past_deadline_at_start, str(tmp_path))
    with pytest.raises(TaskTimeout, match=r"ran past its deadline of 0.3s"):
        run.wait()
    assert time.monotonic() - t0 < 1.2
    time.sleep(3.0)  # time enough for the imports to have ended, had the launchers lived
    assert not list(tmp_path.glob("rank*-started"))
