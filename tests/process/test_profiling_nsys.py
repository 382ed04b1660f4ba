"""``tool=nsys``: the chosen ranks run under ``nsys profile``, their reports kept with the run.

Nsight Systems is not installed on these machines (no NVIDIA driver either), so these tests put
a STAND-IN ``nsys`` on PATH (tests/nsys_stand_in.py, the ``stand_in_nsys`` fixture): it
records its argv, runs the command it wraps and writes a fake report, which is what Shoal
relies on nsys for.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .drivers import shoal_cli
from .programs import profiled

pytestmark = pytest.mark.slow
PROGRAM = str(Path(profiled.__file__))


def test_the_chosen_rank_runs_under_nsys_and_its_report_and_stats_are_kept(
        shoal_home: Path, stand_in_nsys: Path) -> None:
    out = shoal_cli("run", "--quiet", "--name", "r-nsys", "--profile",
                    "profiled:ranks=1:seconds=0.5-1.5:tool=nsys", PROGRAM, "straggler")
    assert out.returncode == 0, out.stderr  # both ranks ran, the wrapped one too
    calls = [json.loads(line) for line in stand_in_nsys.read_text().splitlines()]
    assert [c[0] for c in calls] == ["profile", "stats"]  # rank 1 only: rank 0 was forked
    profile, stats = calls
    folder = shoal_home / "runs" / "r-nsys" / "profiles" / "a0.0" / "r0" / "seconds-0.5-1.5"
    assert profile[:5] == ["profile", "-o", str(folder / "rank1"), "--trace=cuda,nvtx,osrt",
                           "--force-overwrite=true"]
    assert "--delay=0.5" in profile and "--duration=1" in profile
    assert profile[-3:] == [sys.executable, "-m", "shoal._runtime.node.rank"]
    assert stats[-1] == str(folder / "rank1.nsys-rep")
    assert (folder / "rank1.nsys-rep").read_bytes() == b"fake nsys report"
    assert "stand-in nsys stats of" in (folder / "rank1.nsys-stats.txt").read_text()
    assert not (folder / "rank0.nsys-rep").exists()
    listed = shoal_cli("profile", "r-nsys")
    assert "rank1.nsys-rep" in listed.stdout and "rank1.nsys-stats.txt" in listed.stdout


def test_without_nsys_on_path_the_run_is_refused_before_anything_starts(
        shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    out = shoal_cli("run", "--profile", "profiled:tool=nsys", PROGRAM, "straggler")
    assert out.returncode == 2
    assert "needs the `nsys` executable on PATH" in out.stderr
    assert "install Nsight Systems" in out.stderr and "tool=torch" in out.stderr
    runs = shoal_home / "runs"  # the home's folders may exist (made private up front), empty
    assert not runs.exists() or not any(runs.iterdir())  # no run record, no process started
