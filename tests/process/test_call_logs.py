"""A plain call's log file (`_runtime/worker.CallOutput`): a call that prints gets one with its
output; a silent one that ends quickly gets none and leaves no spool behind; a call that runs
has its log while it runs, its output so far in it; a call whose worker dies keeps what it
printed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import shoal
from shoal.errors import TaskFailed

from .programs import call_logs

pytestmark = pytest.mark.slow


def _logs(shoal_home: Path, run: str) -> Path:
    return shoal_home / "runs" / run / "logs"


def test_silent_calls_make_no_file_and_loud_ones_keep_their_output(shoal_home: Path) -> None:
    run = shoal.run(call_logs.fan_out, 40)
    assert run.outputs()[0] == sum(range(40)) + 1
    logs = _logs(shoal_home, run.name)
    files = {p.name for p in logs.iterdir() if p.is_file()}
    # The two loud calls (a0.41, a0.42), nothing for the 40 silent ones (a0.1 to a0.40) and
    # no spool left; the driver's silent call (a0) has one only if it ran long enough.
    assert files - {"a0.0.log"} == {"a0.41.0.log", "a0.42.0.log"}, files
    loud = [p.read_text() for p in logs.glob("*.log") if "loud" in p.read_text()]
    assert sorted(loud) == [f"loud {i} says hello\nloud {i} from C\n" for i in range(2)]
    assert not [p for p in logs.iterdir() if p.name.startswith(".")]


def test_a_running_calls_log_shows_its_output_while_it_runs(shoal_home: Path,
                                                            tmp_path: Path) -> None:
    flag = tmp_path / "go"
    run = shoal.run(call_logs.waits_for, str(flag))  # returns once it started
    logs = _logs(shoal_home, run.name)
    deadline = time.monotonic() + 60
    seen = ""
    while "before the wait" not in seen and time.monotonic() < deadline:
        seen = "".join(p.read_text() for p in logs.glob("*.log")) if logs.is_dir() else ""
        time.sleep(0.05)
    assert "before the wait" in seen
    flag.touch()
    assert run.outputs()[0] == "done"
    (log,) = logs.glob("*.log")
    assert log.read_text() == "before the wait\nafter the wait\n"
    assert not [p for p in logs.iterdir() if p.name.startswith(".")]


def test_a_call_whose_worker_died_keeps_what_it_printed(shoal_home: Path) -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(call_logs.silent_then_dies).outputs()
    assert "[exit code 3]" in str(err.value) and "| last words" in str(err.value)
    logs = [p for p in shoal_home.glob("runs/*/logs/*.log") if "last words" in p.read_text()]
    assert len(logs) == 1
