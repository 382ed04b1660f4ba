"""Durable training: sharded asynchronous checkpoints survive a group restart and a killed
driver, and training resumed from them ends bit for bit where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal._storage.records import Records
from tests.helpers import wait_until

from .programs import durable

pytestmark = pytest.mark.slow


def _processes_of(run: str) -> list[int]:
    import psutil

    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SHOAL_RUN") == run and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except psutil.Error:
            continue
    return alive


def _starts(out: Path, restart: int) -> dict[str, int | None]:
    return json.loads((out / f"start-r{restart}-rank0.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    out = tmp_path_factory.mktemp("clean")
    return shoal.run(durable.train, 30, 5, -1, str(out)).outputs()[0]  # type: ignore[no-any-return]


def test_rank_killed_during_a_save_resumes_bitwise(tmp_path: Path, uninterrupted: list[float],
                                                   shoal_home: Path) -> None:
    run = shoal.run(durable.train, 30, 5, 19, str(tmp_path))
    params = run.outputs()[0]
    assert _starts(tmp_path, 0) == {"loaded": None, "start": 0}
    after = _starts(tmp_path, 1)
    # The save begun at step 19 commits only if every rank's shard landed before the kill;
    # the one of step 14 had landed on every rank (the program waits for that).
    assert after["loaded"] in (14, 19) and after["start"] == after["loaded"] + 1  # type: ignore[operator]
    assert params == uninterrupted  # bit for bit
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert "gang_restart" in kinds


def test_fsdp2_sharded_save_and_load(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    clean = shoal.run(durable.train, 12, 4, -1, str(first), "fsdp").outputs()[0]
    second = tmp_path / "second"
    second.mkdir()
    killed = shoal.run(durable.train, 12, 4, 9, str(second), "fsdp").outputs()[0]
    # Saves begin after steps 3 and 7; rank 1 dies after step 9, once every rank's shard of
    # the asynchronous save of step 7 has landed (the program waits for it).
    assert _starts(second, 1)["loaded"] == 7
    assert killed == clean


def test_resume_after_killing_the_driver_continues_from_the_checkpoint(
        tmp_path: Path, uninterrupted: list[float], shoal_home: Path) -> None:
    program = Path(durable.__file__)
    driver = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli.main", "run", str(program), "pipeline", "--steps", "30",
         "--every", "5", "--out_dir", str(tmp_path), "--pause_at", "17"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    # Each rank pauses once its shard of the asynchronous save of step 14 has landed.
    wait_until("training to reach the pause",
               lambda: all((tmp_path / f"paused-rank{r}").exists() for r in range(4)),
               timeout=120, every=0.2, alive=[driver])
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    records = Records(shoal_home / "shoal.db")
    records.reap_dead_runs()
    crashed = records.list_runs(limit=1)[0]
    assert crashed.state == "crashed"
    wait_until("the killed driver's gang to end", lambda: not _processes_of(crashed.name),
               timeout=20, every=0.2, detail=lambda: f"alive: {_processes_of(crashed.name)}")
    (tmp_path / "no-more-pauses").write_text("1")
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", "--resume", crashed.name],
                       capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == uninterrupted
    resumed = _starts(tmp_path, 0)  # a resumed run starts its gang afresh (restart 0)
    assert resumed == {"loaded": 14, "start": 15}
