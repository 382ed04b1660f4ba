"""System metrics and metric bridges in real runs: a plain call and a 2-rank gang log metrics;
the launcher (forked ranks, or torchrun's) samples every rank; TensorBoard event files and W&B
offline runs appear per rank; a bridge that fails does not fail the run."""

from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import pytest
from tensorboardX.proto.event_pb2 import Event

import shoal
from shoal import _contract as contract
from shoal._storage.metrics import RunMetrics
from shoal._storage.records import Records

from .drivers import shoal_cli
from .programs import metrics_tasks

pytestmark = pytest.mark.slow


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar of the event files in ``folder``: tag -> [(step, value, wall time)].
    The files are TFRecords: length (8 bytes), its CRC (4), the Event, the Event's CRC (4)."""
    out: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                out[value.tag].append((event.step, value.simple_value, event.wall_time))
    return dict(out)


@pytest.fixture
def fast_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.SYSTEM_METRICS_INTERVAL, "0.3")


def _check_system_series(home: Path, run: str, ranks: list[int]) -> None:
    metrics = RunMetrics(home, run)
    metrics.refresh()
    for name in ("system/cpu_percent", "system/rss_bytes"):
        series = {s.rank: s for s in metrics.series(name=name, source="system")}
        assert sorted(series) == ranks, name
        for s in series.values():
            assert len(s.values) >= 2, (name, s.rank)
            if name == "system/rss_bytes":
                # The first sample may catch a rank just exec'd (~9 MiB, before its imports).
                assert min(s.values) > 2**20 and max(s.values) > 10 * 2**20
            else:
                assert max(s.values) > 5 and all(0 <= v < 100 * 64 for v in s.values)
            assert list(s.steps) == sorted(s.steps)


def test_a_plain_call_to_tensorboard_with_its_system_metrics(
        tmp_path: Path, shoal_home: Path, fast_sampling: None) -> None:
    run = shoal.with_runcontext(metrics=f"tensorboard:{tmp_path}/tb").run(
        metrics_tasks.plain, 5, 1.2)
    run.wait()
    assert run.status == "succeeded"
    scalars = read_scalars(tmp_path / "tb" / run.name / "a0.0" / "task")
    assert [(step, value) for step, value, _ in scalars["loss"]] == [
        (i, pytest.approx(1.0 / (i + 1))) for i in range(5)]
    assert scalars["loss"][0][2] > 1.7e9  # the time the task logged it, not 0
    assert scalars["system/rss_bytes"] and scalars["system/cpu_percent"]
    _check_system_series(shoal_home, run.name, [None])  # type: ignore[list-item]


def test_a_gang_to_tensorboard_and_wandb_offline_one_per_rank(
        tmp_path: Path, shoal_home: Path, fast_sampling: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.METRICS_BRIDGES, f"tensorboard:{tmp_path}/tb,wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    run = shoal.run(metrics_tasks.ranks, 5, 1.5)
    run.wait()
    assert run.status == "succeeded"
    for rank in (0, 1):
        scalars = read_scalars(tmp_path / "tb" / run.name / "a0.0" / f"rank{rank}")
        assert [step for step, _, _ in scalars["loss"]] == [0, 1, 2, 3, 4]
        assert scalars["loss"][0][1] == pytest.approx(1.0 + rank)
        assert "system/cpu_percent" in scalars and "system/rss_bytes" in scalars
    _check_system_series(shoal_home, run.name, [0, 1])
    offline = sorted((shoal_home / "runs" / run.name / "wandb").glob("offline-run-*/*.wandb"))
    assert len(offline) == 2  # one W&B run per rank
    names = set()
    for path in offline:
        data = path.read_bytes()
        assert b"loss" in data and b"system/cpu_percent" in data and len(data) > 1000
        names |= {n for n in (b"rank0", b"rank1") if n in data}
        assert run.name.encode() in data  # the group
    assert names == {b"rank0", b"rank1"}


def test_torchrun_ranks_are_found_and_sampled(shoal_home: Path, fast_sampling: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun the ranks are the launcher's grandchildren (found by LOCAL_RANK)."""
    monkeypatch.setenv(contract.LAUNCH, "torchrun")
    run = shoal.run(metrics_tasks.ranks, 4, 2.0)
    run.wait()
    assert run.status == "succeeded"
    _check_system_series(shoal_home, run.name, [0, 1])


def test_a_failing_bridge_leaves_the_run_alone(tmp_path: Path, shoal_home: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # the event files cannot be created under it
    run = shoal.with_runcontext(metrics=f"tensorboard:{blocker}/tb").run(
        metrics_tasks.plain, 3, 0.5)
    run.wait()
    assert run.status == "succeeded"
    err = capfd.readouterr().err
    assert f"the tensorboard metrics bridge of run {run.name} failed" in err
    assert "switched off, the run goes on" in err


def test_the_cli_refuses_bad_bridges_before_the_run(shoal_home: Path) -> None:
    program = metrics_tasks.__file__
    done = shoal_cli("run", "--metrics", "tensorboard", program, "plain")
    assert done.returncode != 0
    assert "--metrics" in done.stderr and "tensorboard:DIR" in done.stderr
    assert not (shoal_home / "shoal.db").exists() or not Records(
        shoal_home / "shoal.db").list_runs()
