"""`shoal.custom_context` / `get_custom_context` by value: blocks nest and override, calls
carry the context (through pickling too), with_runcontext seeds the root, bad values are
refused, the records keep it, and it is not part of the cache key."""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path

import pytest

import shoal
from shoal._driver.run_options import RunOptions
from shoal._runtime.context import TaskContext, running
from shoal._spec.call import CallSpec
from shoal._storage.records import Records
from shoal.errors import SpecError

env = shoal.TaskEnvironment(name="cctx")


@env.task
def leaf(x: int) -> int:
    return x


def test_blocks_nest_override_and_end() -> None:
    assert shoal.get_custom_context() == {}
    with shoal.custom_context(project="p", trace="t1"):
        assert shoal.get_custom_context() == {"project": "p", "trace": "t1"}
        with shoal.custom_context(trace="t2", extra="e"):
            assert shoal.get_custom_context() == {"project": "p", "trace": "t2", "extra": "e"}
        assert shoal.get_custom_context() == {"project": "p", "trace": "t1"}
    assert shoal.get_custom_context() == {}


def test_inside_a_task_the_calls_context_shows_and_blocks_add_to_it() -> None:
    with running(TaskContext(action="a0", custom_context={"project": "p"})):
        assert shoal.get_custom_context() == {"project": "p"}
        with shoal.custom_context(stage="2"):
            assert shoal.get_custom_context() == {"project": "p", "stage": "2"}
            call = leaf.make_call((1,), {}, parent_action="a0")
        assert dict(call.custom_context) == {"project": "p", "stage": "2"}
        assert dict(leaf.make_call((1,), {}, parent_action="a0").custom_context) == \
            {"project": "p"}


def test_a_call_carries_its_context_through_pickling() -> None:
    with shoal.custom_context(project="p"):
        call = leaf.make_call((3,), {}, parent_action=None)
    back = pickle.loads(pickle.dumps(call))
    assert dict(back.custom_context) == {"project": "p"} and dict(back.inputs) == {"x": 3}
    assert dict(leaf.make_call((3,), {}, parent_action=None).custom_context) == {}


def test_values_must_be_strings() -> None:
    with pytest.raises(SpecError) as err, shoal.custom_context(n=3):  # type: ignore[arg-type]
        pass
    assert err.value.field == "custom_context(...)['n']"
    assert "values must be strings" in err.value.rule and "'3'" in err.value.fix
    with pytest.raises(SpecError) as err:
        shoal.with_runcontext(custom_context={"a": 1})  # type: ignore[dict-item]
    assert err.value.field == "with_runcontext(custom_context=...)['a']"
    with pytest.raises(SpecError, match="keys must be non-empty strings"):
        shoal.with_runcontext(custom_context={"": "x"})


def test_with_runcontext_seeds_the_root_over_the_block() -> None:
    options = shoal.with_runcontext(custom_context={"trace": "run"}).options
    assert options.custom_context == {"trace": "run"}
    assert options.record()["custom_context"] == {"trace": "run"}
    with shoal.custom_context(project="p", trace="block"):
        call = leaf.make_call((1,), {}, parent_action=None)
    seeded = options.seed_root(call)
    assert dict(seeded.custom_context) == {"project": "p", "trace": "run"}
    assert RunOptions().seed_root(call) is call


def test_the_cache_key_ignores_the_context(tmp_path: Path) -> None:
    from shoal._driver.controller import Controller

    cached = leaf.override(cache="auto")
    plain = cached.make_call((1,), {}, parent_action=None)
    with shoal.custom_context(project="p"):
        other = cached.make_call((1,), {}, parent_action=None)
    keys = {Controller._key(None, c) for c in (plain, other)}  # type: ignore[arg-type]
    assert len(keys) == 1 and None not in keys


def test_records_keep_the_context_and_migrate_version_2(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    with Records(path) as records:
        run = records.create_run(task="main", code_file="p.py", engine="local",
                                 store="file:///s", inputs={})
        records.create_action(run=run.name, action_id="a0", task="cctx.leaf", env="cctx",
                              inputs={"x": 1}, custom_context={"project": "p"})
        records.create_action(run=run.name, action_id="a0.1", task="cctx.leaf", env="cctx",
                              inputs={"x": 2})
        assert records.get_action(run.name, "a0").custom_context == {"project": "p"}
        assert records.get_action(run.name, "a0.1").custom_context == {}
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE actions DROP COLUMN custom_context")
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with Records(path) as records:
        assert records.get_action(run.name, "a0").custom_context == {}


def test_callspec_default_is_empty() -> None:
    call = CallSpec(task=leaf.spec(), inputs={"x": 1})
    assert dict(call.custom_context) == {}


def test_ctx_shows_the_block_inside_a_task_only() -> None:
    with running(TaskContext(action="a0", custom_context={"project": "p"})):
        assert shoal.ctx().custom_context == {"project": "p"}
        with shoal.custom_context(stage="2"):
            assert shoal.ctx().custom_context == {"project": "p", "stage": "2"}
    with shoal.custom_context(stage="2"):
        assert not shoal.ctx() and shoal.ctx().custom_context == {}
