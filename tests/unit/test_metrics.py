"""`shoal.log_metrics` checks, the writer's buffer and flushes, and the reader, by value."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import pytest

import shoal
from shoal._api import metrics as api_metrics
from shoal._runtime.observe import metrics as rt
from shoal._storage.metrics import RunMetrics, sparkline
from shoal.errors import SpecError


def _scope(home: Path, **kw: object) -> rt.metrics_scope:
    return rt.metrics_scope(str(home), "run-1", "a0", 0, **kw)  # type: ignore[arg-type]


def test_points_come_back_with_their_identity(tmp_path: Path) -> None:
    with _scope(tmp_path, restart=1, node=1, rank=3):
        shoal.log_metrics({"loss": 2.5, "lr": 1e-3}, step=7)
        shoal.log_metrics({"loss": 2.0})  # step None: the step after the last one
    m = RunMetrics(tmp_path, "run-1")
    assert m.refresh()
    loss, lr = m.series(name="loss")[0], m.series(name="lr")[0]
    assert list(loss.steps) == [7, 8] and list(loss.values) == [2.5, 2.0]
    assert (loss.rank, loss.node, loss.restart, loss.action) == (3, 1, 1, "a0")
    assert list(lr.values) == [1e-3]
    assert not m.refresh()  # nothing new


def test_the_reader_follows_a_file_being_written(tmp_path: Path) -> None:
    m = RunMetrics(tmp_path, "run-1")
    with _scope(tmp_path) as writer:
        shoal.log_metrics({"x": 1.0}, step=0)
        writer.flush()
        assert m.refresh() and len(m.series()[0].values) == 1
        shoal.log_metrics({"x": 2.0}, step=1)
        writer.flush()
        assert m.refresh() and list(m.series()[0].values) == [1.0, 2.0]


def test_a_half_written_last_line_waits_and_damage_is_skipped(tmp_path: Path) -> None:
    with _scope(tmp_path):
        shoal.log_metrics({"x": 1.0}, step=0)
    path = rt.metrics_path(tmp_path, "run-1", "a0", 0)
    with path.open("a") as f:
        f.write('garbage\n{"s": [[0, [1], [1.0], [2.0]]]}\n{"s": [[0, [2], [1.0],')
    m = RunMetrics(tmp_path, "run-1")
    m.refresh()
    assert list(m.series()[0].values) == [1.0, 2.0]
    with path.open("a") as f:
        f.write(' [3.0]]]}\n')
    m.refresh()
    assert list(m.series()[0].values) == [1.0, 2.0, 3.0]


def test_nan_and_inf_are_kept_and_numbers_of_any_kind_accepted(tmp_path: Path) -> None:
    import numpy as np

    with _scope(tmp_path):
        shoal.log_metrics({"a": math.nan, "b": math.inf, "c": np.float32(0.5), "d": 3,
                           "e": np.array(2.0)}, step=0)
    m = RunMetrics(tmp_path, "run-1")
    m.refresh()
    values = {s.name: s.values[0] for s in m.series()}
    assert math.isnan(values["a"]) and values["b"] == math.inf
    assert values["c"] == 0.5 and values["d"] == 3.0 and values["e"] == 2.0
    assert sum(s.non_finite() for s in m.series()) == 2


@pytest.mark.parametrize(("metrics", "step", "field"), [
    ({"loss": "0.5"}, None, "log_metrics(metrics)['loss']"),
    ({"loss": None}, None, "log_metrics(metrics)['loss']"),
    ({"loss": [1.0, 2.0]}, None, "log_metrics(metrics)['loss']"),
    ({3: 1.0}, None, "log_metrics(metrics) name"),
    ({"": 1.0}, None, "log_metrics(metrics) name"),
    ([("loss", 1.0)], None, "log_metrics(metrics)"),
    ({"loss": 1.0}, 1.5, "log_metrics(step)"),
    ({"loss": 1.0}, "3", "log_metrics(step)"),
])
def test_bad_input_is_refused_at_the_call(metrics: object, step: object, field: str) -> None:
    with pytest.raises(SpecError) as e:
        shoal.log_metrics(metrics, step=step)  # type: ignore[arg-type]
    assert e.value.field == field
    assert "Fix:" in str(e.value)


def test_outside_a_task_it_warns_once_and_stores_nothing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_metrics, "_warned_outside", False)
    with pytest.warns(RuntimeWarning, match="outside a task"):
        shoal.log_metrics({"x": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shoal.log_metrics({"x": 1.0})
    assert not (tmp_path / "runs").exists()


def test_a_full_buffer_drops_new_points_and_counts_them(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rt, "MAX_BUFFERED", 10)
    monkeypatch.setattr(rt, "FLUSH_INTERVAL", 60.0)
    with _scope(tmp_path) as writer:
        writer._wake.clear()
        for step in range(15):
            writer.add([("x", 1.0)], step, time.time())
    m = RunMetrics(tmp_path, "run-1")
    m.refresh()
    assert m.points() + m.dropped() == 15 and m.points() >= 10


def test_a_broken_disk_never_fails_the_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the folder should be")
    with _scope(tmp_path):
        shoal.log_metrics({"x": 1.0})
    assert "training goes on without them" in capsys.readouterr().err


def test_the_hot_path_is_a_few_microseconds(tmp_path: Path) -> None:
    with _scope(tmp_path):
        start = time.perf_counter()
        for step in range(20_000):
            shoal.log_metrics({"loss": 0.5, "lr": 0.1}, step=step)
        per_call = (time.perf_counter() - start) / 20_000
    assert per_call < 100e-6  # the goal is 20 µs on a loaded CI core; benchmarks/ measures it


def test_sparkline_marks_non_finite_values() -> None:
    assert sparkline([1.0, 2.0, math.nan, 3.0]) == "▁▄!█"
    assert sparkline([]) == ""
    assert len(sparkline(list(map(float, range(1000))), width=24)) == 24


def test_only_a_new_highest_step_moves_progress_and_the_profiler(tmp_path: Path) -> None:
    seen: list[int] = []
    with _scope(tmp_path) as writer:
        writer.on_step = seen.append
        for step in (1, 2, 3):
            shoal.log_metrics({}, step=step)  # marks each step
        shoal.log_metrics({"loss": 0.3}, step=1)  # the interval's values, read at its end
        shoal.log_metrics({"loss": 0.2}, step=2)
        shoal.log_metrics({"loss": 0.1}, step=3)
        assert seen == [1, 2, 3] and writer.last_step == 3
        shoal.log_metrics({"loss": 0.0})  # step None: the step after the last one logged
        assert seen == [1, 2, 3, 4]


def test_a_call_that_logs_nothing_starts_no_thread_and_writes_no_file(tmp_path: Path) -> None:
    import threading

    with _scope(tmp_path):
        assert not [t for t in threading.enumerate() if t.name == "shoal-metrics"]
    assert not (tmp_path / "runs").exists()


def test_two_closers_at_once_close_the_file_once(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A node launcher's SIGTERM stop and its main loop both close the system-metrics writers;
    # a second os.close of the same descriptor raised EBADF in the stop thread, which then
    # never ended the node (the engine waited ~30 s for it).
    import os
    import threading

    writer = rt.open_writer(tmp_path, "run-1", "a0", 0, rank=0, source="system")
    writer.add([("system/cpu_percent", 50.0)], 0, time.time())
    writer.flush()  # the file is open
    closes: list[int] = []
    real_close = os.close

    def slow_close(fd: int) -> None:
        closes.append(fd)
        time.sleep(0.1)  # both closers get here before either has closed, if both can
        real_close(fd)

    monkeypatch.setattr(rt.os, "close", slow_close)
    errors: list[BaseException] = []

    def close() -> None:
        try:
            writer.close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=close) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(closes) == 1


def test_a_deferred_scope_makes_its_writer_at_the_first_point_only(tmp_path: Path) -> None:
    """A warm worker's call enters its scope deferred: no writer (no file) unless it logs, and
    the header of one made late still says when the call started."""
    before = time.time()
    scope = _scope(tmp_path)
    with scope.deferred():
        assert scope._writer is None
    assert rt.current() is None and not (tmp_path / "runs").exists()
    scope = _scope(tmp_path)
    made = time.time()
    with scope.deferred():
        while time.time() == made:  # the first point comes later than the scope was made
            pass
        shoal.log_metrics({"x": 1.0}, step=0)
        writer = rt.current()
        assert writer is not None and writer is rt.current()
    assert rt.current() is None
    assert before <= writer.identity["started"] <= made
    m = RunMetrics(tmp_path, "run-1")
    assert m.refresh() and list(m.series()[0].values) == [1.0]
