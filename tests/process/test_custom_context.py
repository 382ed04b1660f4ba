"""`shoal.custom_context` across real task processes: seeded by with_runcontext, seen by a
grandchild in another process, overridden by an inner block, recorded with each action."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from shoal.errors import RuntimeUserError

from .programs import custom_context_tasks as p

pytestmark = pytest.mark.slow


def test_the_context_reaches_grandchildren_and_inner_blocks_override_it() -> None:
    run = shoal.with_runcontext(custom_context={"project": "ml", "trace": "run"}).run(p.main)
    root, child, outside, inside = run.outputs()[0]
    pids = [d.pop("pid") for d in (root, child, outside, inside)]
    # Each level in its own process; the two grandchild calls may share a reused worker,
    # which must not keep the context of the call before.
    assert len(set(pids[:3])) == 3 and pids[3] not in pids[:2]
    assert root == {"project": "ml", "trace": "run"}
    assert child == {"project": "ml", "trace": "outer"}
    assert outside == {"project": "ml", "trace": "outer"}
    assert inside == {"project": "ml", "trace": "inner", "stage": "2"}
    with Records(contract.home() / "shoal.db") as records:
        recorded = {a.action_id: a.custom_context for a in records.list_actions(run.name)}
    assert recorded == {"a0": {"project": "ml", "trace": "run"},
                        "a0.1": {"project": "ml", "trace": "outer"},
                        "a0.1.1": {"project": "ml", "trace": "outer"},
                        "a0.1.2": {"project": "ml", "trace": "inner", "stage": "2"}}


def test_a_block_around_a_run_sets_the_roots_context() -> None:
    with shoal.custom_context(project="block"):
        run = shoal.run(p.grandchild)
    out = run.outputs()[0]
    assert {k: v for k, v in out.items() if k != "pid"} == {"project": "block"}


def test_every_rank_of_a_gang_sees_the_context(tmp_path: Path) -> None:
    run = shoal.with_runcontext(custom_context={"project": "ml"}).run(p.drives_a_gang,
                                                                      str(tmp_path))
    run.wait()
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert seen == [{"project": "ml", "stage": "gang"}] * 2


def test_a_resumed_run_calls_again_with_the_recorded_context(tmp_path: Path) -> None:
    run = shoal.with_runcontext(custom_context={"project": "ml"}).run(p.resumable,
                                                                      str(tmp_path))
    with pytest.raises(RuntimeUserError, match="not yet"):
        run.wait()
    (tmp_path / "go").write_text("1")
    resumed = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", "--resume",
                              run.name], capture_output=True, text=True, timeout=120,
                             env=os.environ.copy())
    assert resumed.returncode == 0, resumed.stderr
    assert "replayed" in resumed.stderr  # the first call kept its context, so it replays
    assert len(list(tmp_path.glob("first-*"))) == 1
    assert json.loads(resumed.stdout) == '{"project": "ml"} {"project": "ml"}'
