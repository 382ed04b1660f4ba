"""Hang diagnosis with real gloo gangs: the rank that stopped answering is named, with stacks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from shoal.errors import TaskFailed

from .drivers import shoal_cli
from .programs import gang_hang

pytestmark = pytest.mark.slow

METHODS = ["py-spy", "faulthandler"]


def _failure(run: shoal.Run) -> TaskFailed:  # type: ignore[name-defined]
    with pytest.raises(TaskFailed) as caught:
        run.outputs()
    return caught.value


def _hang_event(home: Path, run: str) -> dict:  # type: ignore[type-arg]
    events = [e for e in Records(home / "shoal.db").events(run) if e.kind == "gang_hang"]
    assert len(events) == 1
    assert isinstance(events[0].data, dict)
    assert "gang hung (" in events[0].message and "stopped answering" in events[0].message
    return events[0].data


@pytest.mark.parametrize("method", METHODS)
def test_a_frozen_rank_is_named_not_the_ranks_that_timed_out(
        method: str, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 3 of a 2x2 gang SIGSTOPs itself after step 3: ranks 0-2 time out in all_reduce;
    the failure names rank 3 (stopped, last step 3), not rank 0."""
    monkeypatch.setenv(contract.HANG_STACKS, method)
    started = time.monotonic()
    run = shoal.run(gang_hang.freezes)
    info = _failure(run).info
    took = time.monotonic() - started
    assert "rank 3 stopped answering (its process is stopped" in info.message
    assert "last step 3" in info.message
    assert "timed out waiting in all_reduce" in info.message
    assert info.rank == 3 and info.node == 1  # the rank that stopped, not the first to time out
    assert "rank 3 (node 1): process stopped" in info.traceback
    assert "failed first" in info.traceback and "all_reduce" in info.traceback
    data = _hang_event(shoal_home, run.name)
    assert data["reason"] == "collective_timeout"
    assert list(data["culprits"]) == ["3"]
    by_rank = {r["rank"]: r for r in data["ranks"]}
    assert by_rank[3]["state"] == "stopped" and by_rank[3]["step"] == 3
    assert set(data["waiting"]) == {"0", "1", "2"}
    logs = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0" / "r0"
    stacks = {r: (logs / f"stacks-rank{r}.txt").read_text() for r in range(4)}
    # On failure: what the node launchers said of their reports, and when
    nodes = "\n".join(f"{f.name}:\n{f.read_text()}" for f in sorted(logs.glob("node*.log")))
    for r in range(3):  # the waiting ranks, recorded live before their timeout
        assert "all_reduce" in stacks[r], f"{stacks[r]}\n{nodes}"
        assert "the rank had failed" not in stacks[r], f"{stacks[r]}\n{nodes}"
    if method == "py-spy":  # py-spy reads a stopped process
        assert "_train" in stacks[3], stacks[3]
    else:
        assert "cannot run faulthandler" in stacks[3], stacks[3]
    print(f"\nfrozen rank ({method}): failure after {took:.1f} s, diagnosis took "
          f"{data['took']:.2f} s, {data['stalled_for']} s after the last step")


@pytest.mark.parametrize(("method", "launch"), [("py-spy", "direct"),
                                                ("faulthandler", "direct"),
                                                ("faulthandler", "torchrun")])
def test_a_rank_sleeping_outside_collectives_is_named_by_the_progress_timeout(
        method: str, launch: str, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 sleeps after step 3 outside any collective; rank 0 waits in all_reduce. No step
    advances for progress_timeout=3 s: the gang is diagnosed (live stacks of both) and
    stopped long before the 60 s collective timeout. Under torchrun too (ranks found under
    its agent)."""
    monkeypatch.setenv(contract.HANG_STACKS, method)
    monkeypatch.setenv(contract.LAUNCH, launch)
    started = time.monotonic()
    run = shoal.run(gang_hang.sleeps)
    info = _failure(run).info
    took = time.monotonic() - started
    assert took < 40
    assert info.kind == "timeout" and info.rank == 1
    assert "made no progress for 3 s" in info.message
    assert "rank 1 stopped answering (not in all_reduce" in info.message
    assert "rank 0 waiting in all_reduce" in info.message
    data = _hang_event(shoal_home, run.name)
    assert data["reason"] == "no_progress" and list(data["culprits"]) == ["1"]
    logs = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0" / "r0"
    assert "stuck_in_sleep" in (logs / "stacks-rank1.txt").read_text()
    assert "all_reduce" in (logs / "stacks-rank0.txt").read_text()
    hang = (logs / "hang.txt").read_text()
    assert "rank 1 stopped answering" in hang and "stuck_in_sleep" in hang
    shown = shoal_cli("logs", run.name, "--rank", "1")
    assert shown.returncode == 0, shown.stderr
    assert "rank 1 stacks <==" in shown.stdout and "stuck_in_sleep" in shown.stdout
    print(f"\nsleeping rank ({method}, {launch}): failure after {took:.1f} s, diagnosis took "
          f"{data['took']:.2f} s, {data['stalled_for']} s after the last step")
