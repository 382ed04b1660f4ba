"""The traps of running gangs on one machine, each handled and tested (see docs/architecture.md)."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from tests.helpers import wait_until

from .programs import gang_traps as traps

pytestmark = pytest.mark.slow


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _processes(run: str, **env: str) -> list[psutil.Process]:
    """This run's processes whose environment has ``env`` (pids inside a node's PID
    namespace differ from the host's, so processes are found by what they carry)."""
    found = []
    for p in psutil.process_iter():
        try:
            e = p.environ()
        except psutil.Error:
            continue
        if e.get("SHOAL_RUN") == run and all(e.get(k) == v for k, v in env.items()):
            found.append(p)
    return found


def test_torchrun_c10d_restart_across_nodes(tmp_path: Path, shoal_home: Path) -> None:
    """torchrun --max-restarts over two nodes (pytorch/pytorch#135712) recovers a dead rank by
    itself: every worker starts again, and Shoal's own group restart is not used."""
    run = shoal.run(traps.torchrun_restart, str(tmp_path))
    assert run.outputs()[0] == 2
    assert (tmp_path / "killed").exists()
    assert len(list(tmp_path.glob("start-*"))) == 4  # 2 workers, each started twice
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert kinds.count("gang_started") == 1


@pytest.mark.parametrize("launch", ["direct", "torchrun"])
def test_a_killed_node_takes_all_its_ranks_with_it(tmp_path: Path, launch: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   shoal_home: Path) -> None:
    """SIGKILL to node 1's launcher alone (its ranks are not signalled): they must not train
    on. A PID namespace per node makes the kernel end them with the launcher."""
    monkeypatch.setenv(contract.LAUNCH, launch)
    run = shoal.run(traps.survives_node_kill, str(tmp_path))
    pidfile = tmp_path / "rank1-r0.pid"
    wait_until(f"{pidfile.name} to be written",
               lambda: pidfile.exists() and pidfile.read_text(), timeout=60)
    # Node 1's launcher: the one whose parent is not itself a launcher (ranks may be forks).
    launcher = next(p for p in _processes(run.name, SHOAL_NODE_RANK="1")
                    if "shoal._runtime.node.launcher" in " ".join(p.cmdline())
                    and "shoal._runtime.node.launcher" not in " ".join(p.parent().cmdline()))
    rank1 = launcher.children(recursive=True)
    assert rank1
    launcher.send_signal(signal.SIGKILL)
    assert run.outputs()[0] == 1  # restarted once, then finished
    assert not any(_alive(p) for p in rank1), f"rank 1 outlived its node ({launch} mode)"
    events = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert "gang_restart" in events


def test_higher_priority_gang_preempts_a_lower_one(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   shoal_home: Path) -> None:
    monkeypatch.setenv(contract.PRIORITY_CLASSES, "batch=10,urgent=100")
    run = shoal.run(traps.low_then_high, str(tmp_path))
    assert run.outputs()[0] == [1, 1]  # low resumed at restart 1 (no restart used), high ran
    high_started = float((tmp_path / "high-0").read_text())
    assert (tmp_path / "low-0-r1").stat().st_mtime >= high_started
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert "gang_preempted" in kinds


def test_unknown_priority_class_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.PRIORITY_CLASSES, "batch=10")
    from shoal.errors import SpecError

    with pytest.raises(SpecError) as err:
        shoal.run(traps.high_job, "/tmp").outputs()[0]
    assert "'urgent'" in str(err.value) and "SHOAL_PRIORITY_CLASSES=urgent=100" in str(err.value)
