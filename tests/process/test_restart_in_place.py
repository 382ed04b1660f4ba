"""A gang restart on the local engine keeps its node launchers, and their zygotes fork ranks
that look exactly like freshly started ones (behaviour, not speed: see benchmarks/recovery.py)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import psutil
import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records
from shoal.errors import RunCancelled
from tests.helpers import wait_until

from .programs import restart_in_place as rip

pytestmark = pytest.mark.slow


def _views(out: Path, restart: int) -> dict[int, dict[str, Any]]:
    return {r: json.loads((out / f"rank{r}-r{restart}.json").read_text()) for r in range(4)}


def _started(home: Path, run: str) -> list[dict[str, Any]]:
    return [e.data for e in Records(home / "shoal.db").events(run) if e.kind == "gang_started"]


def test_a_restart_reuses_the_launchers_with_a_new_port(tmp_path: Path, shoal_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    imports = tmp_path / "imports.txt"
    monkeypatch.setenv("RIP_IMPORTS", str(imports))
    run = shoal.run(rip.record, str(tmp_path), die=True)
    assert run.outputs()[0] == 1  # restarted once, then finished
    first, second = _started(shoal_home, run.name)
    assert second["pids"] == first["pids"]  # the same node launcher processes
    assert second["same_launchers"] and not first["same_launchers"]
    assert second["master_port"] != first["master_port"]
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert kinds.count("gang_admitted") == 1  # the reservation was kept, not asked again
    before, after = _views(tmp_path, 0), _views(tmp_path, 1)
    for rank, view in after.items():
        assert view["restart"] == 1 and view["master_port"] == second["master_port"]
        assert view["env"][contract.TORCH_MASTER_PORT] == str(second["master_port"])
        assert view["env"][contract.JOBSET_RESTART_ATTEMPT] == "1"
        assert view["env"][contract.RESTART_ATTEMPT] == "1"
        assert view["env"][contract.RANK_LOG_DIR].endswith("/r1")
        assert view["torch_loaded"], "a restarted rank was not forked from the zygote"
        assert view["pid"] != before[rank]["pid"]
    # The user's module is imported by every rank of every start, and by nothing else.
    importers = imports.read_text().split()
    ranks = [v["node"] for v in (*before.values(), *after.values())]
    assert sorted(importers) == sorted(ranks) and len(set(ranks)) == 8
    logs = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0"
    assert sorted(p.name for p in (logs / "r1").glob("rank*.log")) == \
        [f"rank{r}.log" for r in range(4)]


def _normalized(view: dict[str, Any], run: str, port: int) -> dict[str, Any]:
    env = {k: v.replace(run, "RUN").replace(str(port), "PORT")
           for k, v in view["env"].items() if k not in (contract.PREIMPORT, contract.LIFELINE_FD)}
    return {**view, "env": env, "pid": 0, "node": "", "torch_loaded": None, "master_port": 0}


def test_a_forked_rank_is_what_a_fresh_rank_is(tmp_path: Path, shoal_home: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Environment, working directory, argv, signal dispositions and mask, threads, stdin:
    the same whether the rank was forked from the zygote or started as a new interpreter."""
    views = {}
    for preimport in ("1", "0"):
        out = tmp_path / preimport
        out.mkdir()
        monkeypatch.setenv(contract.PREIMPORT, preimport)
        run = shoal.run(rip.record, str(out))
        assert run.outputs()[0] == 0
        port = _started(shoal_home, run.name)[0]["master_port"]
        views[preimport] = {r: (v["torch_loaded"], _normalized(v, run.name, port))
                            for r, v in _views(out, 0).items()}
    for rank in range(4):
        (forked_torch, forked), (fresh_torch, fresh) = views["1"][rank], views["0"][rank]
        assert forked_torch and not fresh_torch  # forked from the zygote, and not
        assert forked["env"] == fresh["env"]
        assert forked == fresh


def _processes_of(run: str) -> list[int]:
    """Live processes of the run (launchers, zygotes and ranks all carry SHOAL_RUN)."""
    alive = []
    for p in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if p.environ().get(contract.RUN) == run and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
    return alive


def test_cancel_after_a_restart_in_place_ends_every_process(tmp_path: Path,
                                                             shoal_home: Path) -> None:
    run = shoal.run(rip.hold, str(tmp_path))
    wait_until("the restarted ranks to come up", lambda: len(list(tmp_path.glob("up-*"))) >= 4,
               timeout=60)
    assert _started(shoal_home, run.name)[-1]["same_launchers"]
    assert _processes_of(run.name)
    run.abort()
    with pytest.raises(RunCancelled):
        run.wait()
    wait_until("every launcher, zygote and rank to end with the cancel",
               lambda: not _processes_of(run.name), timeout=10, every=0.1,
               detail=lambda: f"alive: {_processes_of(run.name)}")


def test_a_restart_queues_again_when_another_call_waits(tmp_path: Path, shoal_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The gang holds the whole machine and a plain call waits for it: the restart gives the
    machine back and is admitted again in its turn, in new launchers."""
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=2,memory=8Gi")
    run = shoal.run(rip.gang_and_solo, str(tmp_path))
    assert run.outputs()[0] == [1, 1]  # solo ran; the gang restarted once and finished
    first, second = _started(shoal_home, run.name)
    assert not second["same_launchers"] and second["pids"] != first["pids"]
    kinds = [e.kind for e in Records(shoal_home / "shoal.db").events(run.name)]
    assert kinds.count("gang_admitted") == 2
