"""The scale benchmark's generator (benchmarks/_scale_generator.py) writes what a real gang
writes: Shoal's readers (the metrics reader, the log sources of `shoal logs` and the UI, the
UI's gang view, the CSV export) see its files as they see those of a real 2-rank run beside
them, and read back exactly the points and lines it meant to write."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.logs import log_sources
from shoal._storage.metrics import RunMetrics
from shoal._storage.records import Records
from tests.helpers import benchmark_module
from tests.process.programs import metrics_tasks


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return benchmark_module("_scale_generator")


def _series_keys(home: Path, run: str) -> set[tuple[Any, ...]]:
    m = RunMetrics(home, run)
    m.refresh()
    for s in m.series():  # whole, ordered points: steps count up, one time and value each
        assert list(s.steps) == sorted(s.steps) and len(s.steps) == len(s.values) > 0
    return {(s.name, s.action, s.attempt, s.restart, s.node, s.rank, s.source)
            for s in m.series()}


def _sources(home: Path, records: Records, run: str) -> list[tuple[Any, ...]]:
    return [(s.action, s.attempt, s.restart, s.node, s.rank, s.kind, s.label, s.per_node,
             s.path.name) for s in log_sources(home, records, run)]


def _file_shapes(home: Path, run: str) -> dict[str, tuple[list[str], set[str]]]:
    """Per metrics file: its identity line's keys, and the keys its other lines use."""
    out = {}
    for path in sorted((home / "runs" / run / "metrics" / "a0.0").glob("*.jsonl")):
        lines = [json.loads(raw) for raw in path.read_text().splitlines()]
        out[path.name] = (list(lines[0]), {k for line in lines[1:] for k in line})
    return out


def _gang(home: Path, records: Records, run: str) -> Any:
    from shoal._ui.gang_view import gang_json

    doc = gang_json(records, home, records.get_run(run), "a0")
    return [[(n["node"], [(r["rank"], r["state"]) for r in n["ranks"]]) for n in start["nodes"]]
            for att in doc["attempts"] for start in att["starts"]]


def _csv(run: str) -> list[str]:
    from shoal.cli import metrics_cmd

    out = io.StringIO()
    args = argparse.Namespace(run=run, name=None, rank=None, action=None, system=True, csv=True)
    with contextlib.redirect_stdout(out):
        assert metrics_cmd.execute(args, []) == 0
    return out.getvalue().splitlines()


@pytest.mark.slow
def test_generated_files_read_as_a_real_gangs_and_as_written(
        gen: ModuleType, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("starlette", reason="the gang view is the ui extra's")
    monkeypatch.setenv(contract.SYSTEM_METRICS_INTERVAL, "0.3")
    real = shoal.run(metrics_tasks.ranks, 3, 1.0)  # 1 node x 2 ranks, loss and lr per step
    real.wait()
    assert real.status == "succeeded"
    records = Records(shoal_home / "shoal.db")
    twin = gen.generate(shoal_home, gen.Shape(nodes=1, per_node=2, steps=3, metrics=2,
                                              step_time=0.3, system_interval=0.3))

    def renamed(keys: set[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
        return {k for k in keys if k[0] != "system/pss_bytes"}  # where the kernel gives PSS

    assert renamed(_series_keys(shoal_home, twin)) == renamed(_series_keys(shoal_home,
                                                                           real.name))
    assert _file_shapes(shoal_home, twin) == _file_shapes(shoal_home, real.name)
    assert _sources(shoal_home, records, twin) == _sources(shoal_home, records, real.name)
    assert _gang(shoal_home, records, twin) == _gang(shoal_home, records, real.name)
    assert _csv(twin)[0] == _csv(real.name)[0]

    # A bigger one reads back exactly as generated: every point, every rank, every line.
    shape = gen.Shape(nodes=3, per_node=2, steps=40, log_every=10)
    run = gen.generate(shoal_home, shape)
    metrics = RunMetrics(shoal_home, run)
    metrics.refresh()
    user = metrics.series(source="user")
    assert len(user) == 6 * 4 and metrics.dropped() == 0
    for s in user:
        assert list(s.steps) == list(range(40)) and s.node == s.rank // 2
        assert list(s.values) == [gen._value(s.name, k, s.rank % gen.VARIANTS)
                                  for k in range(40)]
    system = metrics.series(source="system")
    assert {s.name for s in system} == {"system/cpu_percent", "system/pss_bytes",
                                        "system/rss_bytes"}
    assert all(len(s.values) == 20 for s in system) and len(system) == 6 * 3
    assert len(_csv(run)) == 1 + 6 * (4 * 40 + 3 * 20)
    sources = log_sources(shoal_home, records, run)
    assert [(s.kind, s.node, s.rank) for s in sources] == [
        (kind, n, r) for n in range(3)
        for kind, r in [("rank", 2 * n), ("rank", 2 * n + 1), ("node", None)]]
    assert sources[1].label == "[node 0 rank 1 attempt 0]"
    assert sources[1].path.read_text().splitlines()[2:6] == [
        f"rank 1 step {k} loss {gen._value('loss', k, 1):.4f} lr {gen._value('lr', k, 0):.2e}"
        f" at {line.rsplit(' ', 1)[1]}" for k, line in zip(
            (0, 10, 20, 30), sources[1].path.read_text().splitlines()[2:6], strict=True)]
    assert _gang(shoal_home, records, run) == [[(n, [(2 * n, "succeeded"),
                                                     (2 * n + 1, "succeeded")])
                                                for n in range(3)]]
