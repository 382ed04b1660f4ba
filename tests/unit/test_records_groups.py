"""Run records schema 2: actions keep their group path and kind; a version-1 file (written by
an older Shoal) is migrated in place and its actions read as task calls outside any group."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from shoal._storage.records import SCHEMA_VERSION, Records
from shoal._storage.records.schema import _SCHEMA_V1

RUN = {"task": "main", "code_file": "p.py", "engine": "local", "store": "file:///s",
       "inputs": {}}


def _version_1_file(path: Path) -> None:
    """A records file exactly as schema 1 wrote it, with one run and one action."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for statement in _SCHEMA_V1:
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO runs (name, task, code_file, engine, store, inputs, state,"
                 " created_at) VALUES ('r-old', 'main', 'p.py', 'local', 'file:///s', '{}',"
                 " 'succeeded', 1.0)")
    conn.execute("INSERT INTO actions (run, action_id, task, env, state, inputs, outputs,"
                 " created_at) VALUES ('r-old', 'a0', 'env.main', 'env', 'succeeded',"
                 " '{\"x\": 1}', '2', 1.0)")
    conn.commit()
    conn.close()


def test_a_version_1_file_is_migrated_and_stays_readable(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    _version_1_file(path)
    with Records(path) as records:
        old = records.get_action("r-old", "a0")
        assert (old.inputs, old.outputs, old.state) == ({"x": 1}, 2, "succeeded")
        assert old.group_path == () and old.kind == "task"
        records.create_action(run="r-old", action_id="a0.1", parent_id="a0", task="env.f",
                              env="env", inputs={}, group_path=("epoch-1", "shard-3"))
        assert records.get_action("r-old", "a0.1").group_path == ("epoch-1", "shard-3")
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta").fetchone() == (str(SCHEMA_VERSION),)
    assert SCHEMA_VERSION >= 2
    conn.close()


def test_an_unknown_action_kind_is_refused(tmp_path: Path) -> None:
    with Records(tmp_path / "shoal.db") as records:
        records.create_run(name="r-1", **RUN)
        with pytest.raises(ValueError, match="action kind 'step'"):
            records.create_action(run="r-1", action_id="a0", task="t", env="e", inputs={},
                                  kind="step")


def test_begin_trace_replaces_what_an_earlier_attempt_recorded(tmp_path: Path) -> None:
    with Records(tmp_path / "shoal.db") as records:
        records.create_run(name="r-1", **RUN)
        records.create_action(run="r-1", action_id="a0", task="env.main", env="env", inputs={})
        records.begin_trace(run="r-1", action_id="a0.t1", parent_id="a0", name="fetch",
                            env="env", inputs={"i": 1}, group_path=("g",))
        first = records.get_action("r-1", "a0.t1")
        assert (first.kind, first.state, first.group_path) == ("trace", "running", ("g",))
        assert first.started_at is not None and first.ended_at is None
        records.set_action_state("r-1", "a0.t1", "failed", error="ValueError: no")
        # attempt 2 calls another function with other inputs at the same position
        records.begin_trace(run="r-1", action_id="a0.t1", parent_id="a0", name="score",
                            env="env", inputs={"j": 2})
        again = records.get_action("r-1", "a0.t1")
        assert (again.task, again.inputs, again.state, again.error) == (
            "score", {"j": 2}, "running", None)
        assert again.group_path == () and again.ended_at is None
        records.set_action_state("r-1", "a0.t1", "succeeded", outputs={"ok": True})
        assert records.get_action("r-1", "a0.t1").outputs == {"ok": True}
        assert [a.action_id for a in records.list_actions("r-1")] == ["a0", "a0.t1"]
        assert records.find_action("r-1", "a0.t2") is None
        assert records.find_action("r-1", "a0.t1") == records.get_action("r-1", "a0.t1")
