"""`shoal.report` with real task processes, a real store and the real `shoal report` verb."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.report_store import report_uri, stored_reports
from shoal._storage.store import open_store
from shoal.errors import TaskFailed
from tests.helpers import wait_until

from .programs import reports

pytestmark = pytest.mark.slow


def _report(run: str, action: str = "a0", attempt: int = 0) -> str:
    store = open_store()
    return store.get_bytes(report_uri(store.root, run, action, attempt)).decode()


def shoal_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=60, env=os.environ.copy(), cwd=cwd)


def test_a_flushed_report_is_in_the_store_while_the_task_runs(tmp_path: Path) -> None:
    run = shoal.run(reports.tabs, str(tmp_path))
    wait_until("the task to flush its report", (tmp_path / "flushed").exists, timeout=60)
    live = _report(run.name)
    assert run.status == "running"
    assert "<h2>Training</h2>" in live and "<td>0.25</td>" in live
    assert ">main</label>" in live and ">Metrics</label>" in live
    assert "status</b> running" in live
    (tmp_path / "go").write_text("")
    assert run.outputs()[0] == 7
    final = _report(run.name)
    assert "<h2>Training</h2>" not in final and "<p>done</p>" in final  # replace()d
    assert "final loss 0.125" in final and "status</b> finished" in final
    assert "<script" not in final and "http" not in final and "@import" not in final


def test_a_failed_tasks_report_is_kept_with_its_outcome(tmp_path: Path) -> None:
    run = shoal.run(reports.fails, 3)
    with pytest.raises(TaskFailed):
        run.outputs()[0]
    page = _report(run.name)
    assert "step 3 reached" in page and "grad norm exploded" in page
    assert "failed: ValueError: loss is nan" in page


def test_shoal_report_saves_the_html_and_names_actions_that_have_one(tmp_path: Path) -> None:
    run = shoal.run(reports.driver)
    assert run.outputs()[0] == "ok"
    p = shoal_cli("report", run.name, cwd=tmp_path)
    assert p.returncode == 2
    assert f"run {run.name} has no report for action a0" in p.stderr
    assert "a0.1 (attempt 0)" in p.stderr
    p = shoal_cli("report", run.name, "--action", "a0.1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    saved = tmp_path / f"{run.name}-a0.1.html"
    assert "from the child" in saved.read_text()
    out = tmp_path / "sub" / "r.html"
    assert shoal_cli("report", run.name[:-2], "--action", "a0.1", "--attempt", "0",
                     "--out", str(out), cwd=tmp_path).returncode == 0
    assert out.read_text() == saved.read_text()


def test_a_run_without_reports_says_how_to_get_one(tmp_path: Path,
                                                   shoal_home: Path) -> None:
    run = shoal.run(reports.unreported)
    assert run.outputs()[0] == 1
    p = shoal_cli("report", run.name, cwd=tmp_path)
    assert p.returncode == 2
    assert "no task of this run kept a report" in p.stderr
    assert "@env.task(report=True)" in p.stderr
    log = (shoal_home / "runs" / run.name / "logs" / "a0.0.log").read_text()
    assert "'reports.unreported' (action a0) was declared without report=True" in log
    assert not stored_reports(open_store(), run.name)


def test_a_clustered_task_keeps_rank_0s_report(shoal_home: Path) -> None:
    run = shoal.run(reports.ranks)
    assert run.outputs()[0] == 0
    page = _report(run.name)
    assert "hello from rank 0" in page and "hello from rank 1" not in page
    assert "rank</b> 0 of 2" in page and "this is rank 0&#x27;s report" in page
    [report] = stored_reports(open_store(), run.name)
    assert (report.action, report.attempt) == ("a0", 0)
    rank1 = next((shoal_home / "runs" / run.name / "logs" / "gang").glob("a0.0/r0/rank1.log"))
    assert "keeps rank 0's report only" in rank1.read_text()


@pytest.mark.s3
def test_reports_on_an_s3_store_are_saved_without_local_records(
        s3_root: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The path a Kubernetes run takes: pages written through the S3 backend, and
    `shoal report --store` reading them where no local records know the run."""
    monkeypatch.setenv(contract.STORE, s3_root)
    run = shoal.run(reports.fails, 5)
    with pytest.raises(TaskFailed):
        run.outputs()[0]
    monkeypatch.setenv(contract.HOME, str(tmp_path / "elsewhere"))  # no records of the run
    p = shoal_cli("report", run.name, "--store", s3_root, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    page = (tmp_path / f"{run.name}-a0.html").read_text()
    assert "step 5 reached" in page and "failed: ValueError: loss is nan" in page
    p = shoal_cli("report", run.name[:-1], "--store", s3_root, cwd=tmp_path)
    assert p.returncode == 2 and "is the run's full name in" in p.stderr
