"""`shoal run --resume RUN` after the driver was killed: completed calls are replayed from the
records, not run again, and the run finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal._storage.records import Records

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "resumable.py"


def _shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_resume_after_the_driver_was_killed(tmp_path: Path, shoal_home: Path) -> None:
    driver = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "run", str(PROGRAM),
                               "pipeline", "--marker_dir", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "second-started").exists():
        assert time.monotonic() < deadline, "the second step never started"
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    records = Records(shoal_home / "shoal.db")
    records.reap_dead_runs()
    crashed = records.list_runs(limit=1)[0]
    assert crashed.state == "crashed"

    (tmp_path / "go").write_text("1")
    p = _shoal("run", "--resume", crashed.name)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "11"
    assert "steps.first [a0.1] completed in run" in p.stderr and "replayed" in p.stderr
    assert len(list(tmp_path.glob("first-*"))) == 1, "the completed call ran again"
    resumed = records.list_runs(limit=1)[0]
    assert resumed.resumed_from == crashed.name and resumed.state == "succeeded"
    assert records.get_action(resumed.name, "a0.1").state == "replayed"
    assert records.get_action(resumed.name, "a0.2").state == "succeeded"


def test_resume_refuses_a_live_run_and_extra_arguments(tmp_path: Path,
                                                      shoal_home: Path) -> None:
    p = _shoal("run", "--resume", "r-none")
    assert p.returncode == 2 and "shoal runs" in p.stderr
    (tmp_path / "go").write_text("1")
    done = _shoal("run", str(PROGRAM), "pipeline", "--marker_dir", str(tmp_path))
    assert done.returncode == 0
    name = Records(shoal_home / "shoal.db").list_runs(limit=1)[0].name
    p = _shoal("run", "--resume", name, "pipeline")
    assert p.returncode == 2 and "takes its file, task and inputs from the records" in p.stderr
    again = _shoal("run", "--resume", name)  # a finished run replays entirely
    assert again.returncode == 0 and again.stdout.strip() == "11"
    assert len(list(tmp_path.glob("first-*"))) == 1
