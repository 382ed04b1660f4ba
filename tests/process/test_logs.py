"""`shoal logs` of a real 2-node × 2-rank gang whose rank 3 raises: labelled rank lines, the
traceback, --grep, and --follow started while the ranks still run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shoal._storage.logs import LINE_LIMIT
from shoal._storage.records import Records
from tests.helpers import wait_until

from .drivers import shoal_cli

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "gang_logs.py"
CLI = [sys.executable, "-m", "shoal.cli.main"]
BIG = 5 << 20  # one line of 5 MiB


def test_logs_of_a_failed_gang_show_every_rank_labelled(shoal_home: Path) -> None:
    ran = shoal_cli("run", str(PROGRAM), "shout", "--big", str(BIG))
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert "bytes cut" in ran.stderr and len(ran.stderr) < BIG  # `shoal run` echoes it cut
    run = Records(shoal_home / "shoal.db").list_runs(limit=1)[0].name
    logs = shoal_cli("logs", run)
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines[0] == "==> a0 loud.shout attempt 0 (failed) <=="
    assert "(no output)" not in logs.stdout
    for rank in range(4):
        assert (f"[node {rank // 2} rank {rank} attempt 0] hello from rank {rank} "
                f"on node {rank // 2}") in lines
    assert "[node 1 rank 3 attempt 0] Traceback (most recent call last):" in lines
    assert lines.index("[node 1 rank 3 attempt 0] ValueError: rank 3 cannot count") \
        > lines.index("[node 0 rank 0 attempt 0] late line of rank 0")  # rank order

    late = shoal_cli("logs", run, "--grep", r"^late line of rank [02]$")
    assert late.stdout.splitlines() == ["==> a0 loud.shout attempt 0 (failed) <==",
                                        "[node 0 rank 0 attempt 0] late line of rank 0",
                                        "[node 1 rank 2 attempt 0] late line of rank 2"]
    ranked = shoal_cli("logs", run, "--rank", "3", "--action", "a0", "--attempt", "0",
                       "--grep", "Error")
    assert ranked.stdout.splitlines() == ["==> a0 attempt 0 restart 0 rank 3 <==",
                                          '    raise ValueError("rank 3 cannot count")',
                                          "ValueError: rank 3 cannot count"]
    big = f"[node 0 rank 0 attempt 0] big:{'x' * (LINE_LIMIT - 4)} ...[{BIG + 4 - LINE_LIMIT} " \
        "bytes cut; `shoal logs --full` prints the whole line]"
    assert big in lines
    rank0 = shoal_home / "runs" / run / "logs" / "gang" / "a0.0" / "r0" / "rank0.log"
    assert f"big:{'x' * BIG}\n" in rank0.read_text()  # whole on disk
    full = shoal_cli("logs", run, "--rank", "0", "--full", "--grep", "^big:")
    assert full.stdout.splitlines()[1] == f"big:{'x' * BIG}"

    bad = shoal_cli("logs", run, "--grep", "[rank")
    assert bad.returncode == 2 and "--grep='[rank': is not a Python regular expression" \
        in bad.stderr and "Traceback" not in bad.stderr


def test_follow_prints_lines_written_later_and_ends_with_the_run(tmp_path: Path,
                                                                 shoal_home: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    driver = subprocess.Popen([*CLI, "run", str(PROGRAM), "shout", "--gate", str(gate)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    followers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        wait_until("every rank at the gate",
                   lambda: all((gate / f"ready{r}").exists() for r in range(4)), timeout=60)
        run = Records(shoal_home / "shoal.db").list_runs(limit=1)[0].name
        outs = {k: tmp_path / f"{k}.out" for k in ("all", "grep", "stopped")}
        args = {"all": [], "grep": ["--grep", "late|Error", "--rank", "3"], "stopped": []}
        for key, extra in args.items():
            with open(outs[key], "w") as out, open(f"{outs[key]}.err", "w") as err:
                followers[key] = subprocess.Popen([*CLI, "logs", run, "-f", *extra],
                                                  stdout=out, stderr=err)
        wait_until("the first lines followed", lambda: all(
            "hello from rank 3" in outs[k].read_text() for k in ("all", "stopped")), timeout=60)
        assert "late line" not in outs["all"].read_text()  # the ranks wait at the gate

        followers["stopped"].send_signal(signal.SIGINT)  # Ctrl-C while the run goes on
        assert followers["stopped"].wait(10) == 0
        assert "Traceback" not in Path(f"{outs['stopped']}.err").read_text()

        (gate / "go").touch()
        assert followers["all"].wait(60) == 0  # returns by itself once the run ended
        assert followers["grep"].wait(10) == 0
        assert driver.wait(60) == 1
    finally:
        for p in (driver, *followers.values()):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    lines = outs["all"].read_text().splitlines()
    for rank in range(4):
        assert f"a0 [node {rank // 2} rank {rank} attempt 0] late line of rank {rank}" in lines
    assert "a0 [node 1 rank 3 attempt 0] ValueError: rank 3 cannot count" in lines
    assert outs["grep"].read_text().splitlines() == [
        "a0 [node 1 rank 3 attempt 0] late line of rank 3",
        'a0 [node 1 rank 3 attempt 0]     raise ValueError("rank 3 cannot count")',
        "a0 [node 1 rank 3 attempt 0] ValueError: rank 3 cannot count"]
