"""`shoal.logger` in real task processes: each line in its task's log, saying which run and
action logged it, at the level the script gave with `with_runcontext(user_log_level=...)`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "user_logged.py"


def _logs(*args: str) -> tuple[str, list[str]]:
    p = subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True, text=True,
                       timeout=120, env=os.environ.copy())
    assert p.returncode == 0, p.stderr
    run = p.stdout.strip().splitlines()[-1]
    logs = subprocess.run([sys.executable, "-m", "shoal.cli.main", "logs", run],
                          capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert logs.returncode == 0, logs.stderr
    return run, logs.stdout.splitlines()


def test_lines_go_to_the_task_log_with_run_and_action_at_info() -> None:
    run, lines = _logs()
    ours = [line for line in lines if f"[{run}]" in line]
    assert ours == [f"[{run}][a0] INFO starting hello",  # `shoal logs` shows a0's log first
                    f"[{run}][a0] WARNING finished hello after 2 steps",
                    f"[{run}][a0.1] INFO did 2 steps"]


def test_user_log_level_reaches_the_task_processes() -> None:
    run, lines = _logs("DEBUG")
    assert f"[{run}][a0.1] DEBUG step 1 of 2" in lines
    assert f"[{run}][a0.1] DEBUG step 2 of 2" in lines
