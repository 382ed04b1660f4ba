"""Flyte's Echo and Sleep task types (``shoal.plugins.echo.Echo``, ``shoal.extras.Sleep``):
their checks when an environment or task is made, and the controller answering their calls
without a process. The runs here are real runs on the local engine (records, store, lease
table), in this process: an Echo or Sleep root starts no process, which is what they check."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver.runner import Runner, RunOutcome
from shoal._engines.local.machine import LeaseTable
from shoal._storage.records import Records
from shoal.clustered import ClusteredTaskEnvironment
from shoal.errors import NonRecoverableError, SpecError, TaskTimeout
from shoal.extras import Sleep
from shoal.plugins.echo import Echo
from tests.helpers import wait_until_async

echo_env = shoal.TaskEnvironment("px-echo", plugin_config=Echo(), cache="auto")
sleep_env = shoal.TaskEnvironment("px-sleep", plugin_config=Sleep())


@echo_env.task
async def echo_list(values: list[int]) -> list[int]:
    raise AssertionError("an Echo task's body never runs")


@sleep_env.task(retries=2)
async def pause(duration: timedelta) -> None:
    raise AssertionError("a Sleep task's body never runs")


@sleep_env.task(retries=1, timeout=shoal.Timeout(max_runtime=0.2, deadline=0.3))
async def bounded_pause(duration: timedelta) -> None:
    return None


def _refused(make: Any) -> SpecError:
    with pytest.raises(SpecError) as err:
        make()
    return err.value


# --- checks when the environment or the task is made ------------------------------------------
def _echo_task(func: Any) -> Any:
    return shoal.TaskEnvironment("px-echo-check", plugin_config=Echo()).task(func)


def _sleep_task(func: Any) -> Any:
    return shoal.TaskEnvironment("px-sleep-check", plugin_config=Sleep()).task(func)


def test_an_echo_task_must_return_its_one_input() -> None:
    async def two(a: int, b: int) -> int: ...
    async def other(message: str) -> int: ...
    async def nothing_back(message: str) -> None: ...
    async def out_of_nothing() -> str: ...
    async def identity(values: dict[str, list[int]]) -> dict[str, list[int]]: ...
    async def no_io() -> None: ...

    e = _refused(lambda: _echo_task(two))
    assert (e.field, e.value) == ("parameters of task 'px-echo-check.two'", "a, b")
    assert "at most one input" in e.rule and "one dataclass" in str(e.fix)
    e = _refused(lambda: _echo_task(other))
    assert (e.field, e.value) == ("return type of task 'px-echo-check.other'", "int")
    assert "returns its input 'message' as it is, so it returns str" in e.rule
    assert e.fix == "declare `-> str`"
    assert _refused(lambda: _echo_task(nothing_back)).value == "None"
    e = _refused(lambda: _echo_task(out_of_nothing))
    assert "without inputs has no output" in e.rule and "-> None" in str(e.fix)
    assert _echo_task(identity).spec().env.processless == "echo"
    assert _echo_task(no_io).spec().env.processless == "echo"


def test_a_sleep_task_takes_one_timedelta_and_returns_nothing() -> None:
    async def seconds(duration: float) -> None: ...
    async def none() -> None: ...
    async def extra(duration: timedelta, note: str) -> None: ...
    async def answers(duration: timedelta) -> int: ...
    async def fine(wait: timedelta) -> None: ...

    for func, given in ((seconds, "duration: float"), (none, "no parameters"),
                        (extra, "duration: datetime.timedelta, note: str")):
        e = _refused(lambda f=func: _sleep_task(f))
        assert (e.field, e.value) == (f"parameters of task 'px-sleep-check.{func.__name__}'",
                                      given)
        assert "exactly one parameter, of type datetime.timedelta" in e.rule
        assert f"def {func.__name__}(duration: timedelta) -> None" in str(e.fix)
    e = _refused(lambda: _sleep_task(answers))
    assert (e.value, e.rule, e.fix) == ("int", "a Sleep task returns nothing",
                                        "declare it `-> None`")
    assert _sleep_task(fine).spec().env.processless == "sleep"


def test_echo_and_sleep_refuse_what_needs_a_process() -> None:
    e = _refused(lambda: ClusteredTaskEnvironment("px-gang", replicas=2, plugin_config=Echo()))
    assert e.field == "ClusteredTaskEnvironment('px-gang').plugin_config"
    assert "runs each call as a gang" in e.rule
    assert e.fix == "give it to a plain environment: TaskEnvironment('px-gang', " \
                    "plugin_config=Echo())"
    e = _refused(lambda: shoal.TaskEnvironment(
        "px-reused", plugin_config=Sleep(), reusable=shoal.ReusePolicy(replicas=1)))
    assert e.field == "TaskEnvironment('px-reused').reusable"
    assert "starts no process" in e.rule and e.fix == "leave reusable out"

    async def reported(message: str) -> str: ...
    e = _refused(lambda: shoal.TaskEnvironment("px-report", plugin_config=Echo()).task(
        report=True)(reported))
    assert (e.field, e.value) == ("task 'px-report.reported': report", True)


@pytest.mark.parametrize(("module", "fix"), [
    ("flyteplugins.echo.task", "`from shoal.plugins.echo import Echo`"),
    ("flyte.extras._sleep", "`from shoal.extras import Sleep`"),
])
def test_flytes_own_configs_are_refused_naming_the_import(module: str, fix: str) -> None:
    name = module.split(".")[1].capitalize() if "echo" in module else "Sleep"
    foreign = type(name, (), {"__module__": module})()
    e = _refused(lambda: shoal.TaskEnvironment("px-foreign", plugin_config=foreign))
    assert "shoal.plugins.echo.Echo, shoal.extras.Sleep" in e.rule
    assert fix in str(e.fix)


def test_shoal_run_takes_a_sleeps_duration_with_a_unit() -> None:
    from shoal.cli.args import convert

    for text, seconds in (("90", 90), ("1.5m", 90), ("250ms", 0.25), ("2h", 7200), ("1d", 86400)):
        assert convert(text, timedelta, "--duration") == timedelta(seconds=seconds), text
    e = _refused(lambda: convert("2x", timedelta, "--duration"))
    assert (e.field, e.value) == ("--duration", "2x")
    assert "a number and one of ms, s, m, h, d" in e.rule and e.fix == \
        "pass a timedelta, e.g. --duration 90s"


# --- the controller answers: no process, no slot, records, cache, deadline, cancel ------------
def _run(task: Any, **kwargs: Any) -> tuple[Runner, RunOutcome, float]:
    runner = Runner(task.make_call((), kwargs, parent_action=None), envs=[task.env.spec()])
    start = time.monotonic()
    outcome = asyncio.run(runner.run())
    return runner, outcome, time.monotonic() - start


def _records() -> Records:
    return Records(contract.home() / "shoal.db")


def test_an_echo_call_is_recorded_and_cached_and_starts_nothing() -> None:
    first, outcome, _ = _run(echo_list, values=[3, 1, 2])
    assert (outcome.state, outcome.output) == ("succeeded", [3, 1, 2])
    assert first.engine_envs == []  # the engine never saw the environment
    assert "echo, answered by the driver; no process starts on the local engine" \
        in first.dry_run()
    again, outcome, _ = _run(echo_list, values=[3, 1, 2])
    assert (outcome.state, outcome.output) == ("succeeded", [3, 1, 2])
    actions = {r: _records().get_action(r.name, "a0") for r in (first, again)}
    assert [(a.state, a.outputs) for a in actions.values()] == [
        ("succeeded", [3, 1, 2]), ("cached", [3, 1, 2])]
    log = contract.home() / "runs" / first.name / "logs" / "a0.0.log"
    assert "echo, its output is its input (answered by the driver, no process)" in \
        log.read_text()
    assert not (contract.home() / "runs" / first.name / "workers").exists()


def test_a_sleep_is_bounded_by_its_timeout_and_deadline() -> None:
    runner, outcome, took = _run(bounded_pause, duration=timedelta(seconds=30))
    assert outcome.state == "failed" and isinstance(outcome.error, TaskTimeout)
    # attempt 0 ran past max_runtime (0.2 s); the retry was cut short by the 0.3 s deadline
    assert "ran past its deadline of 0.3s" in str(outcome.error)
    assert 0.25 < took < 5, took
    attempts = _records().list_attempts(runner.name)
    assert [a.state for a in attempts] == ["failed", "failed"]
    log = (contract.home() / "runs" / runner.name / "logs" / "a0.0.log").read_text()
    assert "ran past its timeout of 0.2s (a sleep of 30s, in the driver)" in log


def test_a_negative_sleep_fails_once_without_retries() -> None:
    runner, outcome, _ = _run(pause, duration=timedelta(seconds=-1))
    assert isinstance(outcome.error, NonRecoverableError)
    assert "duration=datetime.timedelta(days=-1, seconds=86399): a Sleep task waits for its " \
           "duration, which must be >= 0" in str(outcome.error)
    assert len(_records().list_attempts(runner.name)) == 1  # retries=2 were not used


def test_a_sleep_holds_no_share_of_the_machine_and_ends_when_cancelled(
        shoal_home: Path) -> None:
    runner = Runner(pause.make_call((timedelta(hours=1),), {}, parent_action=None),
                    envs=[sleep_env.spec()])
    log = shoal_home / "runs" / runner.name / "logs" / "a0.0.log"

    async def scenario() -> tuple[RunOutcome, float, list[Any]]:
        running = asyncio.ensure_future(runner.run())
        await wait_until_async("the sleep to start", log.exists, timeout=10)
        leases_db = contract.machine_dir() / "leases.db"
        leases = LeaseTable(contract.machine_dir()).leases() if leases_db.exists() else []
        asked = time.monotonic()
        runner.cancel()
        outcome = await asyncio.wait_for(running, 10)
        return outcome, time.monotonic() - asked, leases

    outcome, took, leases = asyncio.run(scenario())
    assert leases == []  # no lease of the machine's pool while it sleeps
    assert outcome.state == "cancelled" and took < 3, took
    action = _records().get_action(runner.name, "a0")
    assert action.state == "cancelled"
    assert [a.state for a in _records().list_attempts(runner.name)] == ["cancelled"]
