"""Profiling real gangs: 2 gloo ranks on CPU, each workload classified by `shoal profile`, the
straggler named, the traces in the layout HTA and Perfetto read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal._storage import profile_files

from .drivers import shoal_cli
from .programs import profiled

pytestmark = pytest.mark.slow
PROGRAM = str(Path(profiled.__file__))


def _summary(home: Path, run: str, gang: bool = True,
             ) -> tuple[profile_files.ProfileWindow, dict[str, Any]]:
    (window,) = profile_files.windows(home, run)
    # a gang's is written when it ends; a plain call's by the first `shoal profile`
    assert window.summary_path.exists() == gang
    summary = profile_files.window_summary(window)
    assert summary is not None
    return window, summary


def test_a_slow_dataset_is_data_bound_and_the_traces_are_laid_out_per_rank(
        shoal_home: Path) -> None:
    run = shoal.run(profiled.data_bound, 6)
    assert run.outputs()[0] == 6
    window, summary = _summary(shoal_home, run.name)
    assert window.folder == (shoal_home / "runs" / run.name / "profiles" / "a0.0" / "r0" /
                             "steps-2-4")
    traces = window.traces()
    assert sorted(traces) == [0, 1]
    for rank, path in traces.items():
        trace = json.loads(path.read_text())
        assert not any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"])
        assert trace["distributedInfo"]["rank"] == rank  # what HTA reads ranks from
        steps = {e["name"] for e in trace["traceEvents"]
                 if e.get("name", "").startswith("ProfilerStep#")}
        assert steps == {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}
        names = {e.get("name") for e in trace["traceEvents"]}
        assert "shoal/data" in names
    assert summary["verdict"].startswith("data-bound: ")
    assert summary["verdict"].endswith("of step time waiting for data, on all ranks")
    for rank in summary["ranks"]:
        assert [s["step"] for s in rank["steps"]] == [2, 3, 4]
        assert rank["shares"]["data"] > 0.6


def test_a_large_all_reduce_with_tiny_compute_is_communication_bound(shoal_home: Path) -> None:
    run = shoal.run(profiled.communication_bound, 6)
    run.wait()
    _, summary = _summary(shoal_home, run.name)
    assert summary["verdict"].startswith("communication-bound: ")
    assert all(r["bound"] == "comm" for r in summary["ranks"])


def test_large_matmuls_with_a_tiny_all_reduce_are_compute_bound(shoal_home: Path) -> None:
    run = shoal.run(profiled.compute_bound, 6)
    run.wait()
    _, summary = _summary(shoal_home, run.name)
    assert summary["verdict"].startswith("compute-bound: ")


def test_a_rank_that_sleeps_each_step_is_named_the_straggler(shoal_home: Path) -> None:
    run = shoal.run(profiled.straggler, 6)
    run.wait()
    window, summary = _summary(shoal_home, run.name)
    assert summary["stragglers"]["straggler"] == 1
    waits = {t["rank"]: t["wait_ms"] for t in summary["stragglers"]["table"]}
    assert waits[0] > 60 > 10 > waits[1]  # rank 0 waits out rank 1's 100 ms sleep
    out = shoal_cli("profile", run.name)
    assert out.returncode == 0, out.stderr
    assert "rank 1 is the straggler" in out.stdout
    assert str(window.folder) in out.stdout


def test_a_task_without_steps_is_profiled_over_seconds_from_the_command_line(
        shoal_home: Path) -> None:
    out = shoal_cli("run", "--quiet", "--name", "r-profile-seconds", "--profile",
                    "profiled:ranks=1:seconds=0.5-1.5:shapes=1", PROGRAM, "no_steps",
                    "--seconds", "2.5")
    assert out.returncode == 0, out.stderr
    window, summary = _summary(shoal_home, "r-profile-seconds")
    assert window.window == "seconds-0.5-1.5" and sorted(window.traces()) == [1]
    events = json.loads(window.traces()[1].read_text())["traceEvents"]
    assert any("Input Dims" in e.get("args", {}) for e in events)  # shapes=1 reached torch
    (rank,) = summary["ranks"]
    (only,) = rank["steps"]
    assert only["step"] is None and 700 < only["total_ms"] < 1600
    shown = shoal_cli("profile", "r-profile-seconds", "--json")
    assert json.loads(shown.stdout)[0]["window"] == "seconds-0.5-1.5"


def test_a_plain_task_is_profiled_in_its_worker_and_profile_names_known_envs(
        shoal_home: Path) -> None:
    out = shoal_cli("run", "--quiet", "--name", "r-profile-plain", "--profile",
                    "profiled_plain:steps=1-3", PROGRAM, "plain_steps")
    assert out.returncode == 0, out.stderr
    _, summary = _summary(shoal_home, "r-profile-plain", gang=False)
    assert [s["step"] for s in summary["ranks"][0]["steps"]] == [1, 2, 3]
    bad = shoal_cli("run", "--profile", "nope:steps=1-2", PROGRAM, "plain_steps")
    assert bad.returncode == 2
    assert "'nope' is not an environment this task reaches" in bad.stderr
    assert "profiled_plain" in bad.stderr
    none = shoal_cli("profile", "r-profile-plain", "--action", "a9")
    assert none.returncode == 2 and "has no profiles for action a9" in none.stderr


def test_a_window_that_never_opens_says_why_in_the_task_log(shoal_home: Path) -> None:
    out = shoal_cli("run", "--quiet", "--name", "r-profile-late", "--profile",
                    "profiled_plain:steps=50-52", PROGRAM, "plain_steps")
    assert out.returncode == 0, out.stderr
    assert profile_files.windows(shoal_home, "r-profile-late") == []
    logs = shoal_cli("logs", "r-profile-late")
    assert ("its window (steps-50-52) never opened: the last step the task reported was 5"
            in logs.stdout)


@pytest.mark.s3
def test_on_an_object_store_the_traces_are_kept_in_it_and_read_back_from_it(
        shoal_home: Path, s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from shoal import _contract as contract
    from shoal._storage.store import open_store

    monkeypatch.setenv(contract.STORE, s3_root)
    run = shoal.run(profiled.straggler, 6)
    run.wait()
    keys = open_store(s3_root).list(f"{s3_root}/runs/{run.name}/profiles")
    assert sorted(k.rsplit("/", 1)[-1] for k in keys) == ["rank0.json", "rank1.json"]
    shutil.rmtree(shoal_home / "runs" / run.name / "profiles")  # as on a pod: gone
    out = shoal_cli("profile", run.name, "--store", s3_root)
    assert out.returncode == 0, out.stderr
    assert "rank 1 is the straggler" in out.stdout
