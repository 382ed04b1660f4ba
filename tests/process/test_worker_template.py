"""Workers forked from the engine's worker template (`_engines/local/templates.py`): each is
what a fresh ``python -m shoal._runtime.worker`` would be, its end is reported as a started
worker's is, and without a template (turned off, or gone) workers start afresh. A run's idle
template is kept for the process's next run with the same environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import shoal
from shoal import _contract as contract
from shoal.errors import TaskFailed

from .programs import forked

pytestmark = pytest.mark.slow

TEMPLATE = "shoal._runtime.worker_template"


def test_a_forked_worker_starts_as_a_fresh_one_would(shoal_home: Path) -> None:
    run = shoal.run(forked.tour)
    facts = run.outputs()[0]
    assert TEMPLATE in facts["parent"]
    # What `ps` and psutil show of it is what they show of a fresh worker.
    assert facts["cmdline"].split() == [sys.executable, "-m", "shoal._runtime.worker"]
    assert (facts["shown_env"], facts["shown_greeting"]) == ("leaf", "hi")
    assert facts["session_leader"] == "True" and facts["cwd"] == os.getcwd()
    assert facts["argv0"].endswith(os.path.join("shoal", "_runtime", "worker.py"))
    assert facts["greeting"] == "hi" and facts["stdin"] == "/dev/null"
    assert facts["sigint"] == facts["sigchld"] == "True" and int(facts["blocked"], 16) == 0
    # A variable an interpreter reads only as it starts differs: that worker starts afresh.
    assert TEMPLATE not in facts["own_path_parent"]
    assert facts["checkpoint_imported"] == "False"  # the driver's calls made no checkpoint
    logs = "".join(p.read_text() for p in (shoal_home / "runs" / run.name).rglob("*.log"))
    assert "a line in the call's log" in logs


def test_a_forked_workers_death_is_reported_with_its_exit_code() -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(forked.dies, 7).outputs()
    assert err.value.info.exit_code == 7


def test_with_its_template_gone_the_next_worker_starts_afresh() -> None:
    first, second = shoal.run(forked.template_killed).outputs()[0]
    assert TEMPLATE in first["parent"] and TEMPLATE not in second["parent"]
    assert second["pid"] != first["pid"]


def test_turned_off_every_worker_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.WORKER_TEMPLATE, "0")
    assert TEMPLATE not in shoal.run(forked.facts).outputs()[0]["parent"]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _gone_soon(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


def test_the_next_run_in_the_process_forks_from_the_same_template() -> None:
    first = shoal.run(forked.facts).outputs()[0]
    assert _alive(int(first["ppid"]))  # parked between the runs
    second = shoal.run(forked.facts).outputs()[0]
    assert TEMPLATE in second["parent"] and second["ppid"] == first["ppid"]
    assert second["pid"] != first["pid"]  # a new worker: the run's workers ended with it


def test_a_run_with_another_environment_ends_the_parked_template(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = shoal.run(forked.facts).outputs()[0]
    monkeypatch.setenv("SHOAL_TEST_OTHER", "1")  # the workers would inherit it: not the same
    second = shoal.run(forked.facts).outputs()[0]
    assert second["ppid"] != first["ppid"]
    assert _gone_soon(int(first["ppid"]))


def test_a_parked_template_that_died_is_replaced() -> None:
    first = shoal.run(forked.facts).outputs()[0]
    os.kill(int(first["ppid"]), signal.SIGKILL)
    assert _gone_soon(int(first["ppid"]))
    second = shoal.run(forked.facts).outputs()[0]
    assert TEMPLATE in second["parent"] and second["ppid"] != first["ppid"]


def test_kept_off_the_template_ends_with_its_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.KEEP_WORKER_TEMPLATE, "0")
    first = shoal.run(forked.facts).outputs()[0]
    assert not _alive(int(first["ppid"]))  # closed and waited for before run() returned


def test_the_parked_template_ends_when_the_process_exits(shoal_home: Path) -> None:
    program = ("import shoal\nfrom tests.process.programs import forked\n"
               "print(shoal.run(forked.facts).outputs()[0]['ppid'], flush=True)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert _gone_soon(int(done.stdout.split()[-1]))


def test_a_child_forked_from_the_process_starts_its_own_template() -> None:
    first = shoal.run(forked.facts).outputs()[0]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's parked template is not its to use
        code = 1
        try:
            os.close(read)
            facts = shoal.run(forked.facts).outputs()[0]
            os.write(write, facts["ppid"].encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as said:
        child_ppid = said.read()
    assert os.waitpid(pid, 0)[1] == 0
    assert child_ppid and child_ppid != first["ppid"]
    assert _alive(int(first["ppid"]))  # still the parent's, parked
    assert shoal.run(forked.facts).outputs()[0]["ppid"] == first["ppid"]
