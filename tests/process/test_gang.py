"""Clustered tasks on the local engine: real processes, real gloo, real JAX on CPU."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import psutil
import pytest

import shoal
from shoal._storage.records import Records
from shoal.errors import TaskFailed
from tests.helpers import wait_until

from .programs import gang

pytestmark = pytest.mark.slow


def _records(home: Path) -> Records:
    return Records(home / "shoal.db")


def _no_survivors(home: Path, run: str) -> list[int]:
    """Processes of this run still alive (launchers and ranks carry SHOAL_RUN)."""
    alive = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("SHOAL_RUN") == run and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except psutil.Error:
            continue
    return alive


def test_ddp_2x2_returns_rank0_loss(shoal_home: Path) -> None:
    run = shoal.run(gang.train, 40)
    loss = run.outputs()[0]
    assert isinstance(loss, float) and loss < 0.05
    logs = list((shoal_home / "runs" / run.name / "logs" / "gang").glob("a0.0/r0/rank*.log"))
    assert len(logs) == 4
    assert "step 0 loss" in (logs[0].parent / "rank0.log").read_text()
    assert not _no_survivors(shoal_home, run.name)


def test_ddp_4x1_through_override(shoal_home: Path) -> None:
    gang.ddp_env.override("replicas", 4)
    gang.ddp_env.override("nproc_per_node", 1)
    try:
        with warnings.catch_warnings():  # 4 nodes of 1 CPU on a smaller machine: clamped, said
            warnings.filterwarnings("ignore", message=r".*exceeds this machine's")
            assert shoal.run(gang.train, 20).outputs()[0] < 1.0
    finally:
        gang.ddp_env.override("nproc_per_node", 2)
        gang.ddp_env.override("replicas", 2)


def test_topology_on_every_rank(tmp_path: Path, shoal_home: Path) -> None:
    run = shoal.run(gang.topology, str(tmp_path))
    out = run.outputs()[0]
    assert out["rank"] == 0 and out["world_size"] == 2 and out["nnodes"] == 2
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["node_rank"] for r in ranks] == [0, 1]
    assert [r["env_rank"] for r in ranks] == [0, 1]
    assert all(r["env_world"] == 2 and r["local_rank"] == 0 for r in ranks)
    # shoal.logger lines land in each rank's own log, naming the rank
    logs = sorted((shoal_home / "runs" / run.name / "logs" / "gang").rglob("rank*.log"))
    lines = [line for log in logs for line in log.read_text().splitlines() if "topology" in line]
    assert lines == [f"[{run.name}][a0][rank {r}] INFO topology seen by pid {ranks[r]['pid']}"
                     for r in range(2)]


def test_kill9_of_a_rank_restarts_the_group(tmp_path: Path, shoal_home: Path) -> None:
    marker = tmp_path / "killed.pid"
    run = shoal.run(gang.train, 40, 0.05, 10, str(marker))
    loss = run.outputs()[0]
    assert marker.exists(), "rank 1 never killed itself"
    assert loss < 0.05
    events = _records(shoal_home).events(run.name)
    kinds = [e.kind for e in events]
    assert kinds.count("gang_started") == 2 and "gang_restart" in kinds
    restart = next(e for e in events if e.kind == "gang_restart")
    assert restart.data["rank"] == 1, restart.message  # the killed rank, not a peer it broke
    assert not _no_survivors(shoal_home, run.name)


def test_restarts_exhausted_reports_the_first_failing_rank(shoal_home: Path) -> None:
    t0 = time.monotonic()
    run = shoal.run(gang.always_fails, 1)
    with pytest.raises(TaskFailed) as err:
        run.outputs()[0]
    assert time.monotonic() - t0 < 90, "the survivor waited for the collective timeout"
    info = err.value.info
    assert info.rank == 1 and info.node == 1
    assert "rank 1 failed first" in info.message and "broke on purpose" in info.message
    assert info.exit_code == 1
    assert "rank 1 is about to fail" in info.log_tail
    assert "RuntimeError: rank 1 broke on purpose" in info.traceback
    text = str(err.value)
    assert "rank 1" in text and "node 1" in text and "attempt 0" in text
    kinds = [e.kind for e in _records(shoal_home).events(run.name)]
    assert kinds.count("gang_started") == 2  # max_restarts=1: one restart, then the report
    assert not _no_survivors(shoal_home, run.name)


def test_wrong_type_on_any_rank_fails_the_task() -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(gang.wrong_type_on_rank1).outputs()[0]
    assert err.value.info.rank == 1 and "on rank 1" in err.value.info.message


def test_an_unanswering_peer_fails_within_the_collective_timeout(tmp_path: Path,
                                                                  shoal_home: Path) -> None:
    t0 = time.monotonic()
    run = shoal.run(gang.hang_on_rank1, str(tmp_path))
    with pytest.raises(TaskFailed) as err:
        run.outputs()[0]
    assert time.monotonic() - t0 < 90
    # named: the rank that stopped answering, not rank 0 whose collective timed out
    assert err.value.info.rank == 1
    assert "rank 1 stopped answering (its process is stopped" in err.value.info.message
    assert "rank 0 timed out waiting in all_reduce" in err.value.info.message
    assert not _no_survivors(shoal_home, run.name), "a stopped rank survived"


def test_preemption_resumes_without_using_a_restart(tmp_path: Path, shoal_home: Path) -> None:
    run = shoal.run(gang.wait_for_preemption, str(tmp_path))
    wait_until("the gang to start",
               lambda: (tmp_path / "ready-0").exists() and (tmp_path / "ready-1").exists(),
               timeout=60, every=0.1)
    from shoal._driver.runner import PREEMPT_REQUEST

    _records(shoal_home).add_event(run.name, PREEMPT_REQUEST, "test")
    assert run.outputs()[0] == 1  # restart_attempt 1, although max_restarts=0
    assert (tmp_path / "sigterm-0").exists(), "ranks did not get SIGTERM before being killed"
    kinds = [e.kind for e in _records(shoal_home).events(run.name)]
    assert "gang_preempted" in kinds and "gang_restart" not in kinds


def test_jax_2x1_cross_process_reduction(shoal_home: Path) -> None:
    pytest.importorskip("jax")
    run = shoal.run(gang.jax_sum)
    assert run.outputs()[0] == 3.0
    assert not _no_survivors(shoal_home, run.name)


def test_jax_dead_process_stops_the_gang(shoal_home: Path) -> None:
    """A JAX survivor would wait ~100 s for the heartbeat; the gang stops at the first exit."""
    pytest.importorskip("jax")
    t0 = time.monotonic()
    run = shoal.run(gang.jax_process1_dies)
    with pytest.raises(TaskFailed) as err:
        run.outputs()[0]
    assert time.monotonic() - t0 < 45
    assert err.value.info.rank == 1 and "process 1 gives up" in err.value.info.message
    assert not _no_survivors(shoal_home, run.name)
