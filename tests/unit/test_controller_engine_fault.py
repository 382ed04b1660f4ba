"""An error raised out of the engine (not a task failure) still leaves the call's records
finished: the attempt and the action are failed, never left running."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from shoal._driver.controller import Controller
from shoal._spec.call import CallSpec, EnvSpec, TaskSpec
from shoal._storage.records import Records
from shoal._storage.store import open_store
from shoal.errors import EngineError


class _BrokenEngine:
    async def run_attempt(self, call: CallSpec, ref: Any) -> Any:
        raise EngineError("the engine lost the call")


def test_an_engine_error_fails_the_attempt_and_action(tmp_path: Path,
                                                      shoal_home: Path) -> None:
    records = Records(tmp_path / "shoal.db")
    run = records.create_run(name="r-1", task="e.t", code_file="/x.py", engine="local",
                             store=(tmp_path / "store").as_uri(), inputs={}).name
    controller = Controller(run=run, records=records, store=open_store(), home=tmp_path,
                            engine=_BrokenEngine())  # type: ignore[arg-type]
    call = CallSpec(task=TaskSpec(name="e.t", env=EnvSpec(name="e"), code_file="/x.py",
                                  code_hash="", signature=""), inputs={})
    with pytest.raises(EngineError, match="lost the call"):
        asyncio.run(controller.run_root(call))
    action = records.get_action(run, "a0")
    assert action.state == "failed" and "lost the call" in (action.error or "")
    [attempt] = records.list_attempts(run, "a0")
    assert attempt.state == "failed" and "EngineError" in (attempt.error or "")
