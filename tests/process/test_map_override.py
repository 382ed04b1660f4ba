"""`shoal.map` and `task.override` with real worker processes: input order, the concurrency
bound as observed from inside the calls, failures both ways, the async form, outside a run,
and overrides of env_vars, retries, timeout, cache and resources taking effect."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import shoal
from shoal.errors import SpecError

from .programs import mapping

pytestmark = pytest.mark.slow


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder the tasks leave marks in (tmp_path also holds SHOAL_HOME)."""
    path = tmp_path / "marks"
    path.mkdir()
    return path


def test_map_returns_results_in_input_order() -> None:
    assert shoal.run(mapping.map_squares, 30, 4).outputs()[0] == [i * i for i in range(30)]
    assert shoal.run(mapping.map_squares, 0, 0).outputs()[0] == []


def test_map_zips_iterables_and_takes_partials() -> None:
    assert shoal.run(mapping.map_two_inputs, 5).outputs()[0] == [100 + 2 * i for i in range(5)]
    assert shoal.run(mapping.map_partial, 4).outputs()[0] == [1000, 1001, 1002, 1003]


def test_concurrency_bounds_the_calls_in_flight(folder: Path) -> None:
    assert shoal.run(mapping.map_timed, 9, str(folder), 3, 0.0).outputs()[0] == 3


def test_map_stops_at_first_failure_without_starting_more(folder: Path) -> None:
    out = shoal.run(mapping.map_failures, 8, 3, str(folder), False).outputs()[0]
    assert out[:3] == ["0", "1", "2"]
    assert out[3].startswith("raised: ") and "item 3 is bad" in out[3]
    assert len(out) == 4
    assert sorted(os.listdir(folder)) == [f"{i}.started" for i in range(4)]


def test_map_yields_exceptions_in_place_when_asked(folder: Path) -> None:
    out = shoal.run(mapping.map_failures, 5, 2, str(folder), True).outputs()[0]
    assert out[:2] == ["0", "1"] and out[3:] == ["3", "4"]
    assert out[2].startswith("error: ") and "item 2 is bad" in out[2]


def test_map_aio_in_an_async_task(folder: Path) -> None:
    assert shoal.run(mapping.map_aio, 12).outputs()[0] == [i * i for i in range(12)]
    out = shoal.run(mapping.map_aio_failures, 4, 1, str(folder)).outputs()[0]
    assert out == ["0", "RuntimeUserError", "2", "3"]  # Flyte's default: return_exceptions=True


def test_map_outside_a_run_calls_the_functions_in_order(folder: Path) -> None:
    assert list(shoal.map(mapping.square, [3, 1, 2])) == [9, 1, 4]
    assert list(shoal.map(mapping.asquare, [3, 1])) == [9, 1]
    got = list(shoal.map(mapping.fails_on, [0, 1, 2], [1] * 3, [str(folder)] * 3))
    assert got[0] == 0 and isinstance(got[1], ValueError) and got[2] == 2
    with pytest.raises(ValueError, match="item 1 is bad"):
        list(shoal.map(mapping.fails_on, [0, 1, 2], [1] * 3, [str(folder)] * 3,
                       return_exceptions=False))

    async def collect() -> list[int]:
        return [r async for r in shoal.map.aio(mapping.asquare, range(3))]

    import asyncio

    assert asyncio.run(collect()) == [0, 1, 4]


def test_env_vars_override_runs_in_a_worker_started_with_them() -> None:
    base1, over1, base2, over2 = shoal.run(mapping.env_vars_override).outputs()[0]
    assert base1.split()[0] == "base" and over1.split()[0] == "over"
    assert base2.split()[0] == "base" and over2.split()[0] == "over"
    # warm workers are reused, each only for calls with the variables it started with
    assert base1.split()[1] == base2.split()[1] != over1.split()[1] == over2.split()[1]


def test_retries_and_timeout_overrides_take_effect(folder: Path) -> None:
    assert shoal.run(mapping.retries_override, str(folder)).outputs()[0] == 2
    out = shoal.run(mapping.timeout_override).outputs()[0]
    assert out.startswith("timed out: ") and "0.5s" in out


def test_cache_override_keys_the_overridden_calls(folder: Path) -> None:
    assert shoal.run(mapping.cache_override, str(folder)).outputs()[0] == [40, 40, 40]
    assert len(os.listdir(folder)) == 2  # the second overridden call was a cache hit


def test_resources_override_changes_what_the_pool_admits(folder: Path) -> None:
    whole_machine = float(os.cpu_count() or 1)
    # each overridden call asks for every core: the pool runs them one at a time
    assert shoal.run(mapping.map_timed, 3, str(folder), 3, whole_machine).outputs()[0] == 1


def test_map_refuses_what_is_not_a_task_call() -> None:
    with pytest.raises(SpecError, match="must be a task"):
        shoal.map(len, [1])
    with pytest.raises(SpecError, match="concurrency"):
        shoal.map(mapping.square, [1], concurrency=-1)
    with pytest.raises(SpecError, match="one iterable per remaining parameter"):
        shoal.map(mapping.add, [1])


def test_workers_of_old_env_vars_overrides_do_not_pile_up() -> None:
    from shoal._engines.local.workers import KEYS_KEPT_PER_ENV

    used, alive = shoal.run(mapping.many_env_overrides, 7).outputs()[0]
    assert used == 7  # each call ran in a worker started with its own variables
    assert alive <= KEYS_KEPT_PER_ENV
