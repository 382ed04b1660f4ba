"""`@shoal.trace` in one process: naming, encoding, replay and refusals.

The controller is stood in for by a small client that answers from a dict (the real one is a
socket to another process; tests/process/test_groups_and_traces.py runs that for real).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import warnings
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest

import shoal
from shoal._runtime.context import TaskContext, running
from shoal._spec.trace import TraceCall, TraceOutcome, TraceReplay
from shoal.errors import InputError, SpecError


class Recorder:
    """Answers `trace_start` from ``replay`` (action -> output literal), keeps what it heard."""

    def __init__(self, replay: dict[str, Any] | None = None) -> None:
        self.replay = replay or {}
        self.started: list[TraceCall] = []
        self.ended: list[TraceOutcome] = []

    def trace_start(self, call: TraceCall) -> concurrent.futures.Future[Any]:
        self.started.append(call)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        hit = call.action in self.replay
        fut.set_result(TraceReplay(self.replay[call.action], "r-old") if hit else None)
        return fut

    def trace_end(self, outcome: TraceOutcome) -> None:
        self.ended.append(outcome)


def _task(client: Recorder, attempt: int = 0, **extra: Any) -> TaskContext:
    return TaskContext(run_name="r-1", action="a0.2", task="env.t", env="env",
                       attempt=attempt, client=client, **extra)  # type: ignore[arg-type]


calls: list[str] = []


@shoal.trace
def double(x: int) -> int:
    calls.append(f"double({x})")
    return 2 * x


@shoal.trace
def outer(x: int) -> list[int]:
    with shoal.group("inner"):
        second = double(x + 1)
    return [double(x), second]


@shoal.trace
async def unhinted(value):
    await asyncio.sleep(0)
    calls.append("unhinted")
    return {"got": value}


@shoal.trace
def fails(x: int) -> int:
    raise KeyError(x)


def test_outside_a_task_a_traced_function_just_runs() -> None:
    calls.clear()
    assert double(3) == 6 and asyncio.run(unhinted(1)) == {"got": 1}
    assert calls == ["double(3)", "unhinted"]
    assert double.__name__ == "double"


def test_calls_are_named_by_position_nested_under_their_trace_and_recorded() -> None:
    client = Recorder()
    with running(_task(client)), shoal.group("epoch-1"):
        assert double(1) == 2
        assert outer(5) == [10, 12]
        assert asyncio.run(unhinted(lambda_free := (1, 2))) == {"got": lambda_free}
    assert [c.action for c in client.started] == [
        "a0.2.t1", "a0.2.t2", "a0.2.t2.t1", "a0.2.t2.t2", "a0.2.t3"]
    assert [c.parent_action for c in client.started][2:4] == ["a0.2.t2", "a0.2.t2"]
    # a nested call's group is relative to its parent's, as the tree shows it
    assert [c.group for c in client.started] == [("epoch-1",), ("epoch-1",), ("inner",), (),
                                                 ("epoch-1",)]
    first = client.started[0]
    assert (first.name, first.env, first.inputs, first.group) == ("double", "env", {"x": 1},
                                                                  ("epoch-1",))
    assert [e.output for e in client.ended[:4]] == [2, 12, 10, [10, 12]]
    assert "pickle" in client.started[4].inputs["value"]  # no hint: pickled, as in Flyte
    assert all(e.error is None and e.seconds >= 0 for e in client.ended)


def test_counting_starts_over_on_the_next_attempt() -> None:
    client = Recorder()
    for attempt in (0, 1):
        with running(_task(client, attempt=attempt)):
            double(1)
    assert [(c.action, c.attempt) for c in client.started] == [("a0.2.t1", 0), ("a0.2.t1", 1)]


def test_a_recorded_call_is_replayed_without_running() -> None:
    calls.clear()
    client = Recorder(replay={"a0.2.t1": 40})
    with running(_task(client)):
        assert double(20) == 40
        assert double(21) == 42
    assert calls == ["double(21)"] and [e.action for e in client.ended] == ["a0.2.t2"]


def test_an_error_is_recorded_and_raised() -> None:
    client = Recorder()
    with running(_task(client)), pytest.raises(KeyError):
        fails(3)
    assert client.ended[0].error == "KeyError: 3"


def test_task_calls_inside_a_trace_run_as_plain_python() -> None:
    env = shoal.TaskEnvironment(name="trace_unit")

    @env.task
    def inner(x: int) -> int:
        return x + 1

    @shoal.trace
    def wraps_task(x: int) -> int:
        return int(inner(x))

    client = Recorder()
    with running(_task(client)):
        assert wraps_task(1) == 2
        assert shoal.ctx().client is client  # the caller's context is untouched
    assert [c.name for c in client.started] == [wraps_task.__qualname__]


def test_an_input_that_cannot_be_recorded_is_refused_before_running() -> None:
    @shoal.trace
    def takes(lock):
        raise AssertionError("must not run")

    with running(_task(Recorder())), pytest.raises(InputError, match="input 'lock' of traced"):
        takes(threading.Lock())


def test_ranks_of_a_clustered_task_run_it_untraced_with_one_warning() -> None:
    import shoal._api.trace_calls as trace_module

    trace_module._warned_in_gang[0] = False
    calls.clear()
    with running(TaskContext(run_name="r", action="a0.1", task="g.train", attempt=0,
                             rank=1, in_gang=True)), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert double(1) == 2 and double(2) == 4
    assert calls == ["double(1)", "double(2)"]
    assert len(w) == 1 and "runs untraced in 'g.train'" in str(w[0].message)


def test_hints_that_do_not_name_items_or_do_not_resolve_are_refused_at_decoration() -> None:
    def gen() -> list[int]:
        yield 1

    with pytest.raises(SpecError, match="must name the items it yields"):
        shoal.trace(gen)

    def bad(x: Missing) -> int:  # type: ignore[name-defined]  # noqa: F821
        return 0

    with pytest.raises(SpecError, match="must resolve"):
        shoal.trace(bad)


@shoal.trace
def countdown(n: int) -> Iterator[int]:
    calls.append(f"countdown({n})")
    for i in range(n, 0, -1):
        yield double(i)  # a nested trace: a child of the generator's call
    calls.append("countdown done")


@shoal.trace
async def acountdown(n: int) -> AsyncIterator[int]:
    for i in range(n, 0, -1):
        await asyncio.sleep(0)
        calls.append(f"acountdown {i}")
        yield i


def test_a_generator_yields_as_it_runs_and_records_its_items_once_exhausted() -> None:
    calls.clear()
    client = Recorder()
    seen: list[tuple[int, int]] = []
    with running(_task(client)):
        for item in countdown(3):
            seen.append((item, len(client.ended)))  # items arrive before the call ends
            double(0)  # the caller's trace between two items: a sibling of the generator
    assert [i for i, _ in seen] == [6, 4, 2] and seen[0][1] == 1  # only double(3) had ended
    assert [c.action for c in client.started] == [
        "a0.2.t1", "a0.2.t1.t1", "a0.2.t2", "a0.2.t1.t2", "a0.2.t3", "a0.2.t1.t3", "a0.2.t4"]
    gen_end = next(e for e in client.ended if e.action == "a0.2.t1")
    assert (gen_end.output, gen_end.error, gen_end.stopped) == ([6, 4, 2], None, False)
    assert client.started[0].inputs == {"n": 3} and client.started[0].name == "countdown"
    assert calls[0] == "countdown(3)" and calls[-1] == "countdown done"


def test_a_completed_generator_is_replayed_without_running() -> None:
    calls.clear()
    client = Recorder(replay={"a0.2.t1": [9, 8]})
    with running(_task(client)):
        assert list(countdown(2)) == [9, 8]
        assert list(countdown(1)) == [2]  # nothing recorded at a0.2.t2: it runs
    assert calls == ["countdown(1)", "double(1)", "countdown done"]
    assert [e.action for e in client.ended] == ["a0.2.t2.t1", "a0.2.t2"]


def test_an_async_generator_is_traced_and_replayed() -> None:
    async def consume(n: int) -> list[int]:
        return [i async for i in acountdown(n)]

    calls.clear()
    client = Recorder(replay={"a0.2.t2": [7]})
    with running(_task(client)):
        assert asyncio.run(consume(2)) == [2, 1]
        assert asyncio.run(consume(5)) == [7]
        assert shoal.ctx().client is client  # the body's scope did not leak into the caller
    assert calls == ["acountdown 2", "acountdown 1"]
    assert [(e.action, e.output) for e in client.ended] == [("a0.2.t1", [2, 1])]


def test_a_generator_left_early_is_recorded_stopped_and_one_that_raised_failed() -> None:
    @shoal.trace
    def breaks(n: int) -> Generator[int, None, None]:
        yield n
        raise ValueError("no more")

    async def first_of(n: int) -> int:
        gen = acountdown(n)
        item = await gen.__anext__()
        await gen.aclose()
        return item

    @shoal.trace
    async def waits() -> AsyncIterator[int]:
        await asyncio.sleep(60)
        yield 1

    async def cancelled_while_waiting() -> None:
        consumer = asyncio.ensure_future(waits().__anext__())
        await asyncio.sleep(0.01)
        consumer.cancel()
        await consumer

    client = Recorder()
    with running(_task(client)):
        for item in countdown(5):
            if item == 8:
                break
        assert asyncio.run(first_of(4)) == 4
        with pytest.raises(ValueError, match="no more"):
            list(breaks(1))
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(cancelled_while_waiting())
    ends = {e.action: e for e in client.ended}
    assert (ends["a0.2.t4"].stopped, ends["a0.2.t4"].error) == (
        True, "CancelledError stopped it after 0 item(s): not replayed")
    assert ends["a0.2.t1"].stopped and ends["a0.2.t1"].error == (
        "its caller stopped iterating after 2 item(s): not replayed")
    assert ends["a0.2.t2"].stopped and "after 1 item(s)" in str(ends["a0.2.t2"].error)
    assert (ends["a0.2.t3"].stopped, ends["a0.2.t3"].error) == (False, "ValueError: no more")


def test_a_generator_outside_a_task_just_runs_and_sent_values_are_refused() -> None:
    calls.clear()
    assert list(countdown(2)) == [4, 2] and calls[0] == "countdown(2)"
    client = Recorder()
    with running(_task(client)):
        gen = countdown(3)
        next(gen)
        with pytest.raises(SpecError, match="cannot be sent values"):
            gen.send(1)
    assert client.ended[-1].stopped and "sent into it" in str(client.ended[-1].error)


def test_items_that_cannot_be_recorded_fail_the_call_after_it_ran() -> None:
    @shoal.trace
    def locks() -> Iterator[threading.Lock]:
        yield threading.Lock()

    client = Recorder()
    with running(_task(client)), pytest.raises(InputError, match="output of traced function"):
        list(locks())
    assert client.ended[-1].error is not None and "output of traced" in client.ended[-1].error
