"""Workers forked from the engine's worker template (`_engines/local/templates.py`): each is
what a fresh ``python -m shoal._runtime.worker`` would be, its end is reported as a started
worker's is, and without a template (turned off, or gone) workers start afresh."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal.errors import TaskFailed

from .programs import forked

pytestmark = pytest.mark.slow

TEMPLATE = "shoal._runtime.worker_template"


def test_a_forked_worker_starts_as_a_fresh_one_would(shoal_home: Path) -> None:
    run = shoal.run(forked.tour)
    facts = run.outputs()[0]
    assert TEMPLATE in facts["parent"]
    # What `ps` and psutil show of it is what they show of a fresh worker.
    assert facts["cmdline"].split() == [sys.executable, "-m", "shoal._runtime.worker"]
    assert (facts["shown_env"], facts["shown_greeting"]) == ("leaf", "hi")
    assert facts["session_leader"] == "True" and facts["cwd"] == os.getcwd()
    assert facts["argv0"].endswith(os.path.join("shoal", "_runtime", "worker.py"))
    assert facts["greeting"] == "hi" and facts["stdin"] == "/dev/null"
    assert facts["sigint"] == facts["sigchld"] == "True" and int(facts["blocked"], 16) == 0
    # A variable an interpreter reads only as it starts differs: that worker starts afresh.
    assert TEMPLATE not in facts["own_path_parent"]
    assert facts["checkpoint_imported"] == "False"  # the driver's calls made no checkpoint
    logs = "".join(p.read_text() for p in (shoal_home / "runs" / run.name).rglob("*.log"))
    assert "a line in the call's log" in logs


def test_a_forked_workers_death_is_reported_with_its_exit_code() -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(forked.dies, 7).outputs()
    assert err.value.info.exit_code == 7


def test_with_its_template_gone_the_next_worker_starts_afresh() -> None:
    first, second = shoal.run(forked.template_killed).outputs()[0]
    assert TEMPLATE in first["parent"] and TEMPLATE not in second["parent"]
    assert second["pid"] != first["pid"]


def test_turned_off_every_worker_starts_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.WORKER_TEMPLATE, "0")
    assert TEMPLATE not in shoal.run(forked.facts).outputs()[0]["parent"]
