"""Driving the CLI from tests: `shoal ...` as a user types it, and a driver killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from shoal._storage.records import Records
from tests.helpers import wait_until


def shoal_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``shoal ARGS`` in a child process with this test's environment."""
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def kill_driver_when(marker: Path, home: Path, *run_args: str) -> str:
    """Start ``shoal run RUN_ARGS``, SIGKILL its driver once ``marker`` exists, and return the
    run's name, which the records then show as ``crashed``."""
    driver = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "run", *run_args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(f"{marker.name} to appear", marker.exists, timeout=60, every=0.1, alive=[driver])
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    records = Records(home / "shoal.db")
    records.reap_dead_runs()
    crashed = records.list_runs(limit=1)[0]
    assert crashed.state == "crashed"
    return crashed.name
