"""The bridge setting's parser, and the bridge thread's promise: a bridge that raises or hangs
is switched off or abandoned, in bounded time, while the others go on (fake bridge objects fed
real metric files)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._driver.bridges import spec as bridge_spec
from shoal._driver.bridges.follower import Bridge, Bridges, BridgeThread, Point, Stream
from shoal._driver.bridges.spec import BridgeSpec, check_installed, parse_bridges
from shoal._driver.run_options import RunOptions
from shoal._driver.runcontext import with_runcontext
from shoal._driver.runner import check_system_metrics_interval, metric_bridges
from shoal._runtime.observe.metrics import open_writer
from shoal.errors import SpecError


def test_both_bridges_with_their_options(tmp_path: Path) -> None:
    got = parse_bridges(f"tensorboard:{tmp_path}/tb, wandb:rank0", "--metrics")
    assert got == (BridgeSpec("tensorboard", folder=f"{tmp_path}/tb"),
                   BridgeSpec("wandb", rank0_only=True))
    assert parse_bridges("wandb", "--metrics") == (BridgeSpec("wandb"),)
    assert parse_bridges("", "--metrics") == parse_bridges(None, "--metrics") == ()


def test_a_relative_folder_is_made_absolute(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tb,) = parse_bridges("tensorboard:runs/tb", "--metrics")
    assert tb.folder == str(tmp_path / "runs" / "tb")


@pytest.mark.parametrize(("text", "value", "rule", "fix"), [
    ("tensorbord:tb", "tensorbord:tb", "unknown bridge 'tensorbord'", "did you mean 'tensorboard'"),
    ("tensorboard", "tensorboard", "needs the folder", "tensorboard:DIR"),
    ("tensorboard:", "tensorboard:", "needs the folder", "tensorboard:DIR"),
    ("wandb:rank1", "wandb:rank1", "no option but 'rank0'", "wandb:rank0"),
    ("wandb,wandb:rank0", "wandb,wandb:rank0", "names the wandb bridge twice", "keep one"),
    ("wandb,,tensorboard:x", "wandb,,tensorboard:x", "an empty entry", "--metrics"),
])
def test_bad_syntax_names_field_value_rule_and_fix(text: str, value: str, rule: str,
                                                   fix: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_bridges(text, "--metrics")
    assert e.value.field == "--metrics" and e.value.value == value
    assert rule in e.value.rule and fix in e.value.fix


def test_a_missing_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = bridge_spec.importlib.util.find_spec
    monkeypatch.setattr(bridge_spec.importlib.util, "find_spec",
                        lambda name: None if name == "wandb" else real(name))
    check_installed(parse_bridges("tensorboard:tb", "--metrics"), "--metrics")
    with pytest.raises(SpecError) as e:
        check_installed(parse_bridges("tensorboard:tb,wandb", "--metrics"), "--metrics")
    assert "needs the wandb package" in e.value.rule
    assert "pip install 'shoal[wandb]'" in e.value.fix


def test_the_env_var_and_with_runcontext_are_checked_before_a_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.METRICS_BRIDGES, "tensorboard")
    with pytest.raises(SpecError) as e:
        metric_bridges(RunOptions())
    assert e.value.field == contract.METRICS_BRIDGES
    # A run's own setting wins over the variable.
    assert metric_bridges(RunOptions(metrics="wandb")) == (BridgeSpec("wandb"),)
    with pytest.raises(SpecError) as e:
        with_runcontext(metrics="board:x")
    assert e.value.field == "with_runcontext(metrics=...)"
    assert with_runcontext(metrics="wandb:rank0").options.metrics == "wandb:rank0"


@pytest.mark.parametrize("bad", ["-1", "soon", "nan", "inf"])
def test_a_bad_sampling_interval_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(contract.SYSTEM_METRICS_INTERVAL, bad)
    with pytest.raises(SpecError) as e:
        check_system_metrics_interval()
    assert e.value.field == contract.SYSTEM_METRICS_INTERVAL and "0 for none" in e.value.fix
    monkeypatch.setenv(contract.SYSTEM_METRICS_INTERVAL, "0")
    assert contract.system_metrics_interval() == 0.0


# -- the bridge thread, with fake bridges ------------------------------------------------------

class Recording(Bridge):
    name = "recording"

    def __init__(self) -> None:
        self.got: dict[Stream, list[Point]] = {}
        self.closed = False

    def write(self, stream: Stream, points: Sequence[Point]) -> None:
        self.got.setdefault(stream, []).extend(points)

    def close(self) -> None:
        self.closed = True


class Raising(Recording):
    name = "raising"

    def write(self, stream: Stream, points: Sequence[Point]) -> None:
        raise OSError("disk on fire")


class Hanging(Recording):
    name = "hanging"

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def write(self, stream: Stream, points: Sequence[Point]) -> None:
        self.entered.set()
        self.release.wait()  # a service that never answers


def _log(home: Path, run: str, rank: int | None, steps: range) -> None:
    writer = open_writer(home, run, "a1", 0, restart=0 if rank is not None else None,
                         node=0, rank=rank)
    for step in steps:
        writer.add([("loss", 1.0 / (step + 1))], step, 1000.0 + step)
    writer.close()


def test_points_arrive_once_per_stream_in_step_order(tmp_path: Path) -> None:
    _log(tmp_path, "r", 0, range(3))
    _log(tmp_path, "r", 1, range(3))
    bridge = Recording()
    thread = BridgeThread(bridge, tmp_path, "r", poll=0.05)
    assert thread.forward() == 6
    _log(tmp_path, "r", 0, range(3, 5))  # appended to rank 0's file
    assert thread.forward() == 2 and thread.forward() == 0
    assert thread.metrics.points() == 0  # forwarded points are not kept (the driver's memory)
    rank0 = bridge.got[Stream("a1", 0, 0)]
    assert [p[1] for p in rank0] == [0, 1, 2, 3, 4]
    assert rank0[0] == ("loss", 0, 1000.0, 1.0)
    assert Stream("a1", 0, 0).folder == "a1.0/rank0" and Stream("a1", 0, None).folder == "a1.0/task"


def test_a_raising_bridge_is_switched_off_and_the_others_go_on(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _log(tmp_path, "r", 0, range(3))
    good, bad = Recording(), Raising()
    bridges = Bridges([BridgeThread(good, tmp_path, "r", poll=0.05),
                       BridgeThread(bad, tmp_path, "r", poll=0.05)])
    bridges.start()
    time.sleep(0.3)
    bridges.stop(timeout=5)
    assert good.closed and sum(len(p) for p in good.got.values()) == 3
    err = capfd.readouterr().err
    assert err.count("the raising metrics bridge of run r failed (OSError: disk on fire)") == 1
    assert bridges.threads[1].failed == "OSError: disk on fire"


def test_a_hanging_bridge_is_abandoned_within_the_bound(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _log(tmp_path, "r", 0, range(3))
    hung = Hanging()
    bridges = Bridges([BridgeThread(hung, tmp_path, "r", poll=0.05)])
    bridges.start()
    assert hung.entered.wait(30), "the bridge never wrote"  # it is now stuck in write()
    started = time.monotonic()
    bridges.stop(timeout=0.5)
    assert time.monotonic() - started < 1.5
    assert "did not finish within 0.5s; abandoned" in capfd.readouterr().err
    hung.release.set()


def test_wandb_rank0_sends_rank_0_and_plain_calls_only(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._driver.bridges.wandb_bridge import WandbBridge

    sent: list[dict[str, object]] = []
    bridge = WandbBridge(tmp_path, "r", rank0_only=True)
    monkeypatch.setattr(bridge, "_send", sent.append)
    for rank in (None, 0, 1, 3):
        bridge.write(Stream("a1", 0, rank), [("loss", 0, 1.0, 2.0)])
    assert [m["stream"]["rank"] for m in sent] == [None, 0]  # type: ignore[index]
