"""A real Ray call on a head and one worker: `shoal runs` shows a dashboard URL that answers
while the call runs, and `shoal logs --node 1` prints the worker's raylet log once it ended."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from shoal._storage.records import Records
from tests.helpers import wait_until
from tests.process.drivers import shoal_cli

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "dashboard.py"
URL = re.compile(r"^  ray dashboard a0 rayd\.hold: (http://\S+)$", re.MULTILINE)


def _answers(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as res:
            return int(res.status)
    except (urllib.error.URLError, OSError):
        return 0


def test_the_dashboard_answers_and_node_1_logs_its_raylet(shoal_home: Path,
                                                           tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    driver = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "run", str(PROGRAM),
                               "hold", "--gate", str(gate)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        def dashboard() -> str | None:
            m = URL.search(shoal_cli("runs").stdout)
            return m.group(1) if m else None

        url = wait_until("shoal runs to show the dashboard", dashboard, timeout=120,
                         every=0.5, alive=[driver])
        # the dashboard's HTTP server comes up a moment after the head reports it
        assert wait_until(f"{url} to answer", lambda: _answers(url) == 200, timeout=60,
                          every=0.5, alive=[driver])
        (gate / "go").touch()
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err[:2000] + "\n...\n" + err[-3000:]
    assert "Ray cluster up" in err and url in err, err[-3000:]  # `shoal run`'s progress
    run = Records(shoal_home / "shoal.db").list_runs(limit=1)[0]
    assert out.split()[-1:] == ["2"], out  # the CPUs of both nodes: the worker joined

    tree = shoal_cli("runs", run.name).stdout
    assert f"· ray dashboard: {url}" in tree, tree
    assert re.search(r"· ray nodes: 0 head \S+, 1 workers \S+", tree), tree
    logs = shoal_cli("logs", run.name, "--node", "1")
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines[0] == "==> a0 attempt 0 restart 0 node 1 launcher <==", lines[:5]
    header = next(i for i, line in enumerate(lines) if " node 1 ray raylet.out " in line)
    raylet = lines[header + 1:]
    assert raylet and raylet[0] != "(no output)", lines[header:header + 5]
    assert any("(raylet)" in line for line in raylet[:20]), raylet[:5]  # Ray's own lines
    assert "gcs_server" not in logs.stdout.split("Ray's other logs", 1)[0]  # the head's only
