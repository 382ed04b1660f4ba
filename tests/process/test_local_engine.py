"""The local engine with real worker processes: calls, fan-out, failures, retries, timeouts,
admission, cache, and the records each leaves."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

import shoal
from shoal._storage.records import Records
from shoal.errors import MissingDependencyError, TaskFailed, TaskTimeout
from tests.helpers import wait_until

from .programs import basic

pytestmark = pytest.mark.slow


def records(home: Path) -> Records:
    return Records(home / "shoal.db")


def test_plain_call_runs_in_its_environment_process() -> None:
    run = shoal.run(basic.calls_info)
    out = run.outputs()[0]
    assert out.greeting == "hello"  # env_vars of the callee's environment
    assert out.pid != os.getpid()
    assert out.action == "a0.1"
    assert run.status == "succeeded"


def test_fan_out_with_gather(shoal_home: Path) -> None:
    assert shoal.run(basic.fan_out, 20).outputs()[0] == [i * i for i in range(20)]


def test_sync_task_calls_sync_task() -> None:
    assert shoal.run(basic.sync_parent, 5).outputs()[0] == sum(i * i for i in range(5))


def test_user_error_becomes_task_failed_with_log_tail(shoal_home: Path) -> None:
    run = shoal.run(basic.boom, "bad thing")
    with pytest.raises(TaskFailed) as err:
        run.outputs()[0]
    info = err.value.info
    assert info.task == "leaf.boom"
    assert "ValueError: bad thing" in info.message
    assert "about to fail" in info.log_tail
    assert run.status == "failed"
    assert records(shoal_home).get_run(run.name).state == "failed"


def test_child_failure_propagates_and_can_be_caught() -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(basic.calls_boom).outputs()[0]
    assert "a task it called failed: leaf.boom" in str(err.value)
    assert shoal.run(basic.catches_boom).outputs()[0].startswith("caught: ValueError: caught")


def test_retries_then_success(tmp_path: Path, shoal_home: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    run = shoal.run(basic.flaky, str(markers))
    assert run.outputs()[0] == 2
    attempts = records(shoal_home).list_attempts(run.name, "a0")
    assert [a.state for a in attempts] == ["failed", "failed", "succeeded"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_crash_reports_signal_and_log(sig: int) -> None:
    with pytest.raises(TaskFailed) as err:
        shoal.run(basic.die, int(sig)).outputs()[0]
    info = err.value.info
    assert info.kind == "crash"
    assert info.signal == signal.Signals(sig).name
    assert "dying now" in info.log_tail


def test_timeout_kills_the_whole_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("PIDFILE", str(pidfile))
    t0 = time.monotonic()
    with pytest.raises(TaskTimeout) as err:
        shoal.run(basic.slow, 30.0).outputs()[0]
    assert time.monotonic() - t0 < 15
    assert "timeout" in str(err.value)
    child = int(pidfile.read_text())

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until("the task's child process to end with the timeout", gone, timeout=15)


def test_missing_dependency_fails_at_the_call() -> None:
    """The call itself raises (before anything is submitted); the calling task fails with it."""
    with pytest.raises(TaskFailed) as err:
        shoal.run(basic.calls_unreachable).outputs()[0]
    assert err.value.info.message.startswith("MissingDependencyError: ")
    assert "add the TaskEnvironment named 'lonely' to depends_on" in str(err.value)
    assert MissingDependencyError.__name__ in err.value.info.traceback


def test_admission_never_oversubscribes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six 0.5 s calls on a 2-CPU pool (the root suspends its own CPU while it waits) run
    two at a time: at most two start within any 0.4 s window."""
    from shoal._driver import runner as runner_mod
    from shoal._engines.local.pool import Request

    original = runner_mod.make_engine

    def small_engine(kind: str, **kw: object) -> object:
        return original(kind, capacity=Request(cpu=2, memory=2**34, gpu=0), **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner_mod, "make_engine", small_engine)
    starts = sorted(shoal.run(basic.parallel_hold, 6, 0.5).outputs()[0])
    for i in range(len(starts) - 2):
        assert starts[i + 2] - starts[i] >= 0.4, starts


def test_cache_hit_skips_execution(tmp_path: Path, shoal_home: Path) -> None:
    markers = tmp_path / "m"
    markers.mkdir()
    first = shoal.run(basic.use_cache, 1, str(markers))
    assert first.outputs()[0] == 2
    second = shoal.run(basic.use_cache, 1, str(markers))
    assert second.outputs()[0] == 2
    assert len(list(markers.iterdir())) == 1, "the cached task ran twice"
    action = records(shoal_home).get_action(second.name, "a0.1")
    assert action.state == "cached" and action.cache_hit
    assert shoal.run(basic.use_cache, 2, str(markers)).outputs()[0] == 3
    assert len(list(markers.iterdir())) == 2


def test_concurrent_runs_share_the_cache_safely(tmp_path: Path, shoal_home: Path) -> None:
    """Four runs of the same cached call at once: all succeed, and the entry stays whole."""
    import json

    markers = tmp_path / "c"
    markers.mkdir()
    runs = [shoal.run(basic.use_cache, 7, str(markers)) for _ in range(4)]
    assert [r.outputs()[0] for r in runs] == [8] * 4
    entries = list((shoal_home / "store" / "cache" / "cached.expensive").glob("*.json"))
    assert len(entries) == 1
    assert json.loads(entries[0].read_text())["output"] == 8
    assert shoal.run(basic.use_cache, 7, str(markers)).outputs()[0] == 8
