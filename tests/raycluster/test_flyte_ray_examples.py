"""Flyte 2's three Ray example patterns, run as their users run them: ``python prog.py``.

The programs in ``programs/`` are written after Flyte's public examples (``ray_example.py``,
``ray_existing_cluster.py``, ``ray_reusable_cluster.py``), ``import shoal as flyte`` and
``shoal.plugins.ray`` for ``flyteplugins.ray.task``; each prints ``RESULT`` lines checked here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal._storage.records import Records

pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(300)]

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _run(name: str, home: Path, **env: str) -> dict[str, str]:
    environ = {**os.environ, "SHOAL_HOME": str(home), **env}
    environ["PYTHONWARNINGS"] = "ignore"
    done = subprocess.run([sys.executable, str(PROGRAMS / name)], env=environ, cwd=home.parent,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-5000:]}"
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            key, _, value = line[len("RESULT "):].partition(" ")
            results[key] = value
    return results


def test_ray_example_calls_a_plain_task_and_sees_its_runtime_env(shoal_home: Path) -> None:
    # The remote calls see runtime_env's EXTRA=100; the last item is the length of what the
    # plain task the driver called returned ("hello from the plain task").
    assert _run("example.py", shoal_home)["squares"] == "[100, 101, 104, 25]"


def test_existing_cluster_outlives_its_run_for_the_next_runs_client(shoal_home: Path) -> None:
    """Run 1 keeps its cluster (ttl_seconds_after_finished); run 2's plain task joins it as a
    Ray client at ``ray://MY_POD_IP:10001``; the cluster ends with the program at the latest."""
    got = _run("existing.py", shoal_home, KEEP_SECONDS="120")
    assert got["ip"].startswith("127.0.0.")
    assert got["squares"] == "[0, 1, 4, 9, 16]"


def test_reusable_cluster_serves_both_calls_with_one_start(shoal_home: Path) -> None:
    got = _run("reusable.py", shoal_home)
    assert got["sums"] == "30 140"
    assert got["nodes"] == "2 2"
    events = Records(shoal_home / "shoal.db").events(got["run"])
    kinds = [e.kind for e in events]
    assert kinds.count("ray_cluster") == 2, kinds  # each driver says where the cluster is
    assert kinds.count("ray_reused") == 1, kinds  # the second call started no cluster
    starts = [e.data for e in events if e.kind == "gang_started"]
    assert len(starts) == 2 and starts[1]["master_port"] == starts[0]["master_port"]
