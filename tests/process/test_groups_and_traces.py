"""Groups and traces with real runs: recorded, shown by `shoal runs RUN`, and traced calls
replayed on a task's retry and on `shoal run --resume` of a killed driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal._storage.records import Records

from .drivers import kill_driver_when, shoal_cli

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "traced.py"


def _runs(marker_dir: Path, name: str) -> int:
    path = marker_dir / f"{name}.runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_groups_and_traces_are_recorded_and_shown(tmp_path: Path, shoal_home: Path) -> None:
    p = shoal_cli("run", str(PROGRAM), "grouped", "--marker_dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "46"
    assert "▶ prep › work.square [a0.1]" in p.stderr
    assert "▶ train/epoch-1 › work.square [a0.2]" in p.stderr
    assert "· prep › trace load_batch [a0.t1]" in p.stderr
    assert "✗ trace broken [a0.t3] failed: ValueError: cannot handle 7" in p.stderr
    records = Records(shoal_home / "shoal.db")
    run = records.list_runs(limit=1)[0].name
    acts = {a.action_id: a for a in records.list_actions(run)}
    assert acts["a0.1"].group_path == ("prep",) and acts["a0.1"].kind == "task"
    assert acts["a0.2"].group_path == ("train", "epoch-1")
    load = acts["a0.t1"]
    assert (load.kind, load.task, load.parent_id, load.group_path, load.state) == (
        "trace", "load_batch", "a0", ("prep",), "succeeded")
    assert load.inputs == {"marker_dir": str(tmp_path), "index": 1}
    assert load.outputs == {"index": 1, "rows": [10, 11, 12]}
    assert load.started_at is not None and load.ended_at is not None
    assert "pickle" in acts["a0.t2"].outputs  # score has no hints
    assert acts["a0.t3"].state == "failed"
    assert acts["a0.t3"].error == "ValueError: cannot handle 7"

    tree = shoal_cli("runs", run)
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(f"run {run}  boss.grouped  succeeded")
    assert lines[1].startswith("a0  boss.grouped  succeeded")
    assert lines[2] == "├─ ▸ prep  (2 calls: 2 succeeded)"
    assert lines[3].startswith("│  ├─ a0.1  work.square  succeeded")
    assert lines[4].startswith("│  └─ a0.t1  trace load_batch  succeeded")
    assert lines[6] == "│  ├─ ▸ epoch-1  (1 call: 1 succeeded)"
    assert lines[-1].startswith("└─ a0.t3  trace broken  failed")
    assert "out {\"index\": 1" in shoal_cli("runs", run, "--io").stdout
    logs = shoal_cli("logs", run)
    assert "==> a0.2 train/epoch-1 › work.square attempt 0 (succeeded) <==" in logs.stdout


def test_a_retry_replays_the_traced_calls_of_the_failed_attempt(tmp_path: Path,
                                                                shoal_home: Path) -> None:
    p = shoal_cli("run", str(PROGRAM), "retried", "--marker_dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "63"
    assert _runs(tmp_path, "load_batch-2") == 1 and _runs(tmp_path, "score-2") == 1
    assert ("↺ trace load_batch [a0.1.t1] completed in an earlier attempt of its task: "
            "replayed, not run again") in p.stderr
    records = Records(shoal_home / "shoal.db")
    run = records.list_runs(limit=1)[0].name
    assert len(records.list_attempts(run, "a0.1")) == 2
    replays = [e for e in records.events(run) if e.kind == "replayed"]
    assert [(e.action_id, e.data["attempt"]) for e in replays] == [("a0.1.t1", 1),
                                                                   ("a0.1.t2", 1)]


def test_resume_replays_the_traced_calls_of_the_interrupted_action(tmp_path: Path,
                                                                   shoal_home: Path) -> None:
    crashed = kill_driver_when(tmp_path / "traced-twice", shoal_home, str(PROGRAM), "resumable",
                               "--marker_dir", str(tmp_path))
    records = Records(shoal_home / "shoal.db")

    (tmp_path / "go").write_text("1")
    p = shoal_cli("run", "--resume", crashed)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "216"
    assert _runs(tmp_path, "load_batch-3") == 1 and _runs(tmp_path, "score-3") == 1
    assert _runs(tmp_path, "load_batch-4") == 1
    assert f"trace score [a0.1.t2] completed in run {crashed}: replayed" in p.stderr
    resumed = records.list_runs(limit=1)[0].name
    states = {a.action_id: a.state for a in records.list_actions(resumed)}
    assert states == {"a0": "succeeded", "a0.1": "succeeded", "a0.1.t1": "replayed",
                      "a0.1.t2": "replayed", "a0.1.t3": "succeeded"}
    tree = shoal_cli("runs", resumed).stdout
    assert "├─ a0.1.t2  trace score  replayed (not run again)" in tree


def test_a_retry_replays_completed_generators_and_reruns_the_rest(tmp_path: Path,
                                                                 shoal_home: Path) -> None:
    p = shoal_cli("run", str(PROGRAM), "generated", "--marker_dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(500 + 501 + 502 + (0 + 1 + 2 + 3) + 600 + 1)
    # completed generators ran once; the one left early and the one that raised, twice
    assert (_runs(tmp_path, "shard_rows-5"), _runs(tmp_path, "stream-4")) == (1, 1)
    assert (_runs(tmp_path, "shard_rows-6"), _runs(tmp_path, "cut_short")) == (2, 2)
    assert "◦ trace shard_rows [a0.1.t3] its caller stopped iterating after 1 item(s)" in p.stderr
    records = Records(shoal_home / "shoal.db")
    run = records.list_runs(limit=1)[0].name
    acts = {a.action_id: a for a in records.list_actions(run)}
    assert acts["a0.1.t1"].outputs == [{"index": 5, "rows": [500 + k]} for k in range(3)]
    assert (acts["a0.1.t2"].state, acts["a0.1.t2"].outputs) == ("succeeded", [0, 1, 2, 3])
    assert acts["a0.1.t3"].state == "cancelled"
    assert (acts["a0.1.t4"].state, acts["a0.1.t4"].error) == ("failed",
                                                              "ValueError: source went away")
    replays = [e.action_id for e in records.events(run) if e.kind == "replayed"]
    assert replays == ["a0.1.t1", "a0.1.t2"]
    tree = shoal_cli("runs", run).stdout
    assert "trace shard_rows  cancelled" in tree and "after 1 item(s): not replayed" in tree
