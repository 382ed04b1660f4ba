"""`shoal.map` and `task.override` validation, and what an override changes in a call's spec,
its local worker key and admission, without starting a process."""

from __future__ import annotations

import functools

import pytest

import shoal
from shoal._engines.local.plan import worker_key
from shoal._engines.local.pool import Request
from shoal.clustered import ClusteredTaskEnvironment
from shoal.errors import SpecError

env = shoal.TaskEnvironment(name="ovr", env_vars={"A": "1"}, resources=shoal.Resources(cpu=1))
gang = ClusteredTaskEnvironment(name="ovr-gang", replicas=2, nproc_per_node=1)


@env.task
def add(x: int, y: int) -> int:
    return x + y


@gang.task
def train(steps: int) -> int:
    return steps


CAPACITY = Request(cpu=2.0, memory=2**30, gpu=0)


def test_override_changes_only_the_new_tasks_calls() -> None:
    over = add.override(retries=3, timeout=60, cache="auto", env_vars={"B": "2"},
                        resources=shoal.Resources(cpu=2, memory="1Gi"), secrets=["TOKEN"])
    spec, base = over.spec(), add.spec()
    assert (spec.retries, spec.timeout, spec.cache.behavior) == (3, 60.0, "auto")
    assert dict(spec.env.env_vars) == {"A": "1", "B": "2"}  # added to the environment's
    assert spec.env.resources == shoal.Resources(cpu=2, memory="1Gi")
    assert [s.env_var for s in spec.env.secrets] == ["TOKEN"]
    assert (base.retries, base.timeout, base.cache.behavior) == (0, None, "disable")
    assert dict(base.env.env_vars) == {"A": "1"}
    assert spec.name == base.name and over.env is env  # the same task, found by the same name
    assert "add" not in env.tasks or env.tasks["add"] is add  # not registered as another
    assert over(2, 3) == 5  # outside a run: the plain function


def test_overrides_stack_and_zero_retries_turns_retries_off() -> None:
    first = add.override(retries=2, env_vars={"B": "2"})
    second = first.override(env_vars={"C": "3"}, retries=0)
    assert second.spec().retries == 0
    assert dict(second.spec().env.env_vars) == {"A": "1", "B": "2", "C": "3"}


def test_env_vars_override_gets_other_workers() -> None:
    over = add.override(env_vars={"A": "2"})
    assert worker_key(over.spec().env, CAPACITY) != worker_key(add.spec().env, CAPACITY)
    assert worker_key(add.override(retries=1).spec().env, CAPACITY) == worker_key(
        add.spec().env, CAPACITY)


@pytest.mark.parametrize(("changes", "message"), [
    ({"retries": -1}, "retries=-1: must be an int >= 0"),
    ({"retries": True}, "must be an int >= 0"),
    ({"timeout": -5}, "must be a number of seconds >= 0"),
    ({"cache": "sometimes"}, 'must be "auto", "disable", "override"'),
    ({"env_vars": {"1BAD": "x"}}, "must be an environment variable name"),
    ({"env_vars": {"RANK": "0"}}, "is set by Shoal for every task process"),
    ({"resources": {"cpu": 2}}, "must be shoal.Resources"),
    ({"secrets": ["bad/slash"]}, "must be a secret key or a shoal.Secret"),
    ({"pod_template": "x"}, "must be shoal.PodTemplate"),
    ({"interruptible": "yes"}, "must be a bool"),
    ({"name": "other"}, "cannot be overridden"),
    ({"short_name": ""}, "must be a non-empty string"),
    ({"reusable": "sometimes"}, 'must be "off" or shoal.ReusePolicy'),
    ({"max_inline_io_bytes": 10}, "is not a setting Shoal can override"),
])
def test_override_refuses_bad_values_as_the_decorator_does(changes: dict[str, object],
                                                           message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        add.override(**changes)


def test_clustered_task_keeps_its_resources_and_shape() -> None:
    with pytest.raises(SpecError, match="cannot be overridden on a clustered task"):
        train.override(resources=shoal.Resources(cpu=4))
    with pytest.raises(SpecError, match=r"--override ENV\.replicas"):
        train.override(replicas=4)
    assert train.override(retries=1, env_vars={"X": "1"}).spec().env.cluster is not None


def test_map_validates_its_arguments() -> None:
    with pytest.raises(SpecError, match="must be a task"):
        shoal.map(print, [1])
    with pytest.raises(SpecError, match="must be an int >= 0"):
        shoal.map.aio(add, [1], [2], concurrency=1.5)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="group_name"):
        shoal.map(add, [1], [2], group_name="")
    with pytest.raises(SpecError, match="one iterable per remaining parameter"):
        shoal.map(functools.partial(add, 1), [1], [2])
    # a keyword naming a parameter before the mapped one: Python's TypeError, as in Flyte
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        shoal.map(functools.partial(add, x=1), [1])
    assert list(shoal.map(functools.partial(add, y=10), [1, 2])) == [11, 12]
    assert list(shoal.map(add)) == []


def test_map_reads_its_inputs_lazily_and_stops_at_the_shortest() -> None:
    import itertools

    assert list(shoal.map(add, itertools.count(), range(3))) == [0, 2, 4]


def test_map_from_a_rank_of_a_gang_is_refused_even_with_return_exceptions() -> None:
    from shoal._runtime.context import TaskContext, running

    rank = TaskContext(run_name="r", action="a0.1", task=train.name, env=gang.name, rank=1,
                       in_gang=True)
    with running(rank), pytest.raises(SpecError, match="a clustered task cannot call"):
        list(shoal.map(add, [1], [2], return_exceptions=True))
