"""Two real `shoal run`s on one machine share its pool: the second gang waits for the first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shoal import _contract as contract
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "machine_pool.py"


def _env() -> dict[str, str]:
    # Room for exactly one 2-node gang of 1 CPU per node.
    return {**os.environ, contract.MACHINE_CAPACITY: "cpu=2,gpu=0", contract.PREIMPORT: "0",
            contract.PRIORITY_CLASSES: "urgent=100"}


def _run(marker_dir: Path, name: str, task: str = "hold") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shoal.cli.main", "run", str(PROGRAM), task,
         "--marker_dir", str(marker_dir), "--who", name],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _queue() -> str:
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "queue"], capture_output=True,
                       text=True, timeout=60, env=_env(), check=True)
    return p.stdout


def _wait_for(what: str, ok: Callable[[], object], procs: list[subprocess.Popen[str]],
              timeout: float = 60) -> None:
    """`wait_until` ``what``, while every run in ``procs`` goes on."""
    wait_until(what, ok, timeout=timeout, every=0.1, alive=procs)


def test_a_second_runs_gang_waits_for_the_first_and_queue_shows_both(tmp_path: Path) -> None:
    first = _run(tmp_path, "a")
    procs = [first]
    try:
        _wait_for("the first gang", lambda: len(list(tmp_path.glob("a-start0-*"))) == 2, procs)
        second = _run(tmp_path, "b")
        procs.append(second)

        def both_queued() -> bool:
            lines = _queue().splitlines()
            return sum(" gang" in line for line in lines) == 2

        _wait_for("both gangs in `shoal queue`", both_queued, procs)
        time.sleep(1.0)  # several polls of the lease table: the second gang still waits
        assert not list(tmp_path.glob("b-start*")), "both gangs ran at once on 2 CPUs"
        shown = _queue()
        held = [line for line in shown.splitlines() if line.startswith("held")]
        waiting = [line for line in shown.splitlines() if line.startswith("waiting")]
        assert len(held) == 1 and len(waiting) == 1, shown
        assert "a0 gang" in held[0] and held[0].split()[1] != waiting[0].split()[1], shown
        assert "in use cpu=2 " in shown, shown

        (tmp_path / "a-go").write_text("")
        assert first.wait(60) == 0, first.communicate()
        _wait_for("the second gang", lambda: len(list(tmp_path.glob("b-start0-*"))) == 2,
                  procs[1:])
        released = min(p.stat().st_mtime for p in tmp_path.glob("b-start0-*"))
        assert released >= (tmp_path / "a-go").stat().st_mtime
        (tmp_path / "b-go").write_text("")
        assert second.wait(60) == 0, second.communicate()
        assert "no local run holds or waits" in _queue()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def test_a_higher_priority_run_preempts_a_lower_runs_gang_which_resumes(tmp_path: Path) -> None:
    low = _run(tmp_path, "low")
    procs = [low]
    try:
        _wait_for("the low gang", lambda: len(list(tmp_path.glob("low-start0-*"))) == 2, procs)
        high = _run(tmp_path, "high", "hold_urgent")
        procs.append(high)
        _wait_for("the urgent gang", lambda: len(list(tmp_path.glob("high-start0-*"))) == 2,
                  procs)
        shown = _queue()
        held = [line for line in shown.splitlines() if line.startswith("held")]
        waiting = [line for line in shown.splitlines() if line.startswith("waiting")]
        # The low gang was preempted and waits again, behind the urgent one.
        assert len(held) == 1 and " 100 " in held[0], shown
        assert len(waiting) == 1 and " 0 " in waiting[0], shown
        assert not list(tmp_path.glob("low-start1-*"))
        (tmp_path / "high-go").write_text("")
        assert high.wait(60) == 0, high.communicate()
        _wait_for("the low gang's resumption",
                  lambda: len(list(tmp_path.glob("low-start1-*"))) == 2, procs[:1])
        (tmp_path / "low-go").write_text("")
        out, err = low.communicate(timeout=60)
        assert low.returncode == 0, err
        assert out.strip().endswith("1"), out  # resumed at restart 1, no restart used
        assert "preempted" in err, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def test_each_call_and_each_gang_node_sees_only_its_own_gpus(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES names the GPUs a call was given (here a machine said to have 2)."""
    import shoal

    from .programs import machine_pool

    monkeypatch.setenv(contract.MACHINE_CAPACITY, "gpu=2")
    monkeypatch.setenv(contract.PREIMPORT, "0")
    first, second, _ = shoal.run(machine_pool.who_sees_what, str(tmp_path)).outputs()[0]
    assert sorted([first, second]) == ["0", "1"]  # at once, without overlap
    # Each node of the 2-GPU gang sees its own one.
    assert sorted(p.read_text() for p in tmp_path.glob("rank*")) == ["0", "1"]


def test_a_killed_runs_reservation_is_released(tmp_path: Path) -> None:
    first = _run(tmp_path, "a")
    procs = [first]
    try:
        _wait_for("the first gang", lambda: len(list(tmp_path.glob("a-start0-*"))) == 2, procs)
        second = _run(tmp_path, "b")
        procs.append(second)
        _wait_for("the second gang in `shoal queue`",
                  lambda: "waiting" in _queue(), procs)
        first.send_signal(signal.SIGKILL)  # no chance to give its lease back
        first.wait(10)
        _wait_for("the second gang", lambda: len(list(tmp_path.glob("b-start0-*"))) == 2,
                  procs[1:], timeout=30)
        shown = _queue()
        assert "waiting" not in shown and shown.count("held") == 1, shown
        (tmp_path / "b-go").write_text("")
        assert second.wait(60) == 0, second.communicate()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
