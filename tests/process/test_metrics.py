"""`shoal.log_metrics` in real task processes and gang ranks, read back by `shoal metrics`."""

from __future__ import annotations

import csv
import io
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shoal
from shoal._storage.metrics import RunMetrics
from shoal.errors import TaskFailed

from .drivers import shoal_cli
from .programs import metered

pytestmark = pytest.mark.slow


def _metrics(home: Path, run: str) -> RunMetrics:
    m = RunMetrics(home, run)
    m.refresh()
    return m


def test_a_plain_task_keeps_every_point_with_its_step(shoal_home: Path) -> None:
    run = shoal.run(metered.plain, 50)
    assert run.outputs()[0] == 50
    m = _metrics(shoal_home, run.name)
    (loss,) = m.series(name="loss")
    assert list(loss.steps) == list(range(51))
    assert loss.values[0] == 1.0 and math.isnan(loss.values[-1])
    assert loss.action == "a0" and loss.attempt == 0 and loss.rank is None
    assert loss.non_finite() == 1
    assert len(m.series(name="lr")[0].values) == 50
    assert len(m.series(name="from_thread")) == 1
    assert all(abs(t - time.time()) < 120 for t in loss.times)
    # `shoal metrics RUN --csv | head`: a reader that stops early ends the command quietly.
    cli = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "metrics", run.name, "--csv"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    assert cli.stdout is not None
    cli.stdout.close()  # before it writes: its first write meets a closed pipe
    _, err = cli.communicate(timeout=120)
    assert (cli.returncode, err.decode()) == (0, "")


def test_async_and_nested_calls_log_to_their_own_action(shoal_home: Path) -> None:
    run = shoal.run(metered.async_plain, 5)
    run.wait()
    steps = _metrics(shoal_home, run.name).series(name="tokens_per_s")[0].steps
    assert list(steps) == [0, 1, 2, 3, 4]
    run = shoal.run(metered.driver, 3)
    run.wait()
    m = _metrics(shoal_home, run.name)
    assert [s.action for s in m.series(name="driver_metric")] == ["a0"]
    assert [s.action for s in m.series(name="loss")] == ["a0.1"]


def test_points_logged_before_a_failure_are_kept(shoal_home: Path) -> None:
    run = shoal.run(metered.logs_then_fails, 10)
    with pytest.raises(TaskFailed):
        run.wait()
    series = _metrics(shoal_home, run.name).series(name="loss")
    assert series and len(series[0].values) == 10


def test_every_rank_of_a_gang_logs_and_a_restart_keeps_both_starts(tmp_path: Path,
                                                                  shoal_home: Path) -> None:
    marker = tmp_path / "killed"
    run = shoal.run(metered.ranks, 20, 10, str(marker))
    assert run.outputs()[0] == 4 and marker.exists()
    m = _metrics(shoal_home, run.name)
    loss = m.series(name="loss")
    by = {(s.rank, s.restart): s for s in loss}
    assert {r for r, _ in by} == {0, 1, 2, 3}
    assert all(len(by[(r, 1)].values) == 20 for r in range(4))  # the restart ran to the end
    assert [by[(r, 1)].node for r in range(4)] == [0, 0, 1, 1]
    # rank 3's first start logged up to the kill (its last point, -1, flushed or not: the
    # kill is SIGKILL, so at most the last half second of points is lost)
    killed = by.get((3, 0))
    assert killed is None or len(killed.values) <= 11
    # the ranks the gang stopped (SIGTERM) kept what they had flushed: whole steps from 0 on
    for rank in range(3):
        stopped = by.get((rank, 0))
        assert stopped is None or list(stopped.steps) == list(range(len(stopped.values)))

    table = shoal_cli("metrics", run.name)
    assert table.returncode == 0, table.stderr
    assert "rank 3" in table.stdout and "1 restart(s)" in table.stdout
    out = shoal_cli("metrics", run.name, "--name", "loss", "--rank", "2", "--csv")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {"rank", "step", "name", "value"} <= set(rows[0])
    assert {r["rank"] for r in rows} == {"2"} and {r["name"] for r in rows} == {"loss"}
    assert len([r for r in rows if r["restart"] == "1"]) == 20


def test_metrics_cli_names_what_is_wrong(shoal_home: Path) -> None:
    run = shoal.run(metered.plain, 3)
    run.wait()
    unknown = shoal_cli("metrics", run.name, "--name", "nope")
    assert unknown.returncode == 2
    assert "'nope'" in unknown.stderr and "loss" in unknown.stderr
    missing = shoal_cli("metrics", "no-such-run")
    assert missing.returncode == 2 and "no-such-run" in missing.stderr
    flagged = shoal_cli("metrics", run.name, "--name", "loss")
    assert "1 NaN/inf!" in flagged.stdout
