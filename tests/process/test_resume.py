"""`shoal run --resume RUN` after the driver was killed: completed calls are replayed from the
records, not run again, and the run finishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal._storage.records import Records

from .drivers import kill_driver_when, shoal_cli

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "resumable.py"


def test_resume_after_the_driver_was_killed(tmp_path: Path, shoal_home: Path) -> None:
    crashed = kill_driver_when(tmp_path / "second-started", shoal_home, str(PROGRAM), "pipeline",
                               "--marker_dir", str(tmp_path))
    records = Records(shoal_home / "shoal.db")

    (tmp_path / "go").write_text("1")
    p = shoal_cli("run", "--resume", crashed)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "11"
    assert "steps.first [a0.1] completed in run" in p.stderr and "replayed" in p.stderr
    assert len(list(tmp_path.glob("first-*"))) == 1, "the completed call ran again"
    resumed = records.list_runs(limit=1)[0]
    assert resumed.resumed_from == crashed and resumed.state == "succeeded"
    assert records.get_action(resumed.name, "a0.1").state == "replayed"
    assert records.get_action(resumed.name, "a0.2").state == "succeeded"


def test_a_resumed_gang_never_commits_beside_a_shard_of_the_run_it_continues(
        tmp_path: Path, shoal_home: Path) -> None:
    # The resumed run shares the failed run's checkpoint and starts its gang at attempt 0,
    # restart 0, as the failed run's did: its shards must not pair with the failed run's.
    failed = shoal_cli("run", str(PROGRAM), "half_saved", "--marker_dir", str(tmp_path))
    assert failed.returncode != 0 and "half of step 0 saved" in failed.stderr, failed.stderr
    name = Records(shoal_home / "shoal.db").list_runs(limit=1)[0].name
    (tmp_path / "resuming").write_text("1")
    p = shoal_cli("run", "--resume", name)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ('"latest None, rank 1 committed False, '
                                "shards b'resumed 0' b'resumed 1'\""), p.stdout


def test_resume_refuses_a_live_run_and_extra_arguments(tmp_path: Path,
                                                      shoal_home: Path) -> None:
    p = shoal_cli("run", "--resume", "r-none")
    assert p.returncode == 2 and "shoal runs" in p.stderr
    (tmp_path / "go").write_text("1")
    done = shoal_cli("run", str(PROGRAM), "pipeline", "--marker_dir", str(tmp_path))
    assert done.returncode == 0
    name = Records(shoal_home / "shoal.db").list_runs(limit=1)[0].name
    p = shoal_cli("run", "--resume", name, "pipeline")
    assert p.returncode == 2 and "takes its file, task and inputs from the records" in p.stderr
    again = shoal_cli("run", "--resume", name)  # a finished run replays entirely
    assert again.returncode == 0 and again.stdout.strip() == "11"
    assert len(list(tmp_path.glob("first-*"))) == 1
