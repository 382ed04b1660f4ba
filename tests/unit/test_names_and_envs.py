"""Definition-time validation of environments and tasks: bad input fails at once, clearly."""

from __future__ import annotations

import pytest

import shoal
from shoal._spec.names import check_env_name
from shoal.errors import SpecError, UnsupportedTypeError


@pytest.mark.parametrize(
    ("name", "rule", "fix"),
    [
        ("", "must not be empty", None),
        ("Train", "lower case", "'train'"),
        ("9lives", "start with a letter", "'lives'"),
        ("my env", "may only hold", "'my-env'"),
        ("data-", "must not end", "'data'"),
        ("a--b", "two separators", "'a-b'"),
        ("x" * 64, "at most 63", None),
    ],
)
def test_bad_names_say_rule_and_fix(name: str, rule: str, fix: str | None) -> None:
    with pytest.raises(SpecError) as err:
        check_env_name("TaskEnvironment.name", name)
    msg = str(err.value)
    assert "TaskEnvironment.name" in msg and repr(name)[:50] in msg and rule in msg
    if fix:
        assert f"Fix: use {fix}" in msg


@pytest.mark.parametrize("name", ["data", "pre-train", "pre_train", "a1", "gpu-h200-x8"])
def test_good_names(name: str) -> None:
    assert check_env_name("n", name) == name


def test_environment_rejects_bad_fields() -> None:
    with pytest.raises(SpecError, match=r"resources.*must be shoal.Resources"):
        shoal.TaskEnvironment("ok", resources={"cpu": 2})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"env_vars\['RANK'\].*set by Shoal"):
        shoal.TaskEnvironment("ok", env_vars={"RANK": "0"})
    with pytest.raises(SpecError, match=r"env_vars\['1X'\]"):
        shoal.TaskEnvironment("ok", env_vars={"1X": "0"})
    with pytest.raises(SpecError, match=r"cache.*\"auto\""):
        shoal.TaskEnvironment("ok", cache="yes")  # type: ignore[arg-type]
    env = shoal.TaskEnvironment("dep")

    @env.task
    def t() -> int:
        return 1

    with pytest.raises(SpecError, match=r"pass its environment \('dep'\), not the task"):
        shoal.TaskEnvironment("ok", depends_on=[t])  # type: ignore[list-item]


def test_task_needs_type_hints() -> None:
    env = shoal.TaskEnvironment("hints")
    with pytest.raises(SpecError, match=r"parameter 'x' of task 'hints.f'.*needs a type hint"):

        @env.task
        def f(x) -> int:  # type: ignore[no-untyped-def]
            return 1



def test_no_return_annotation_means_none() -> None:
    """Flyte's rule: a task without a return annotation returns None."""
    env = shoal.TaskEnvironment("noret")

    @env.task
    def g(x: int):  # type: ignore[no-untyped-def]
        return x

    assert g.return_type is None and g.spec().signature.endswith("-> None")
    g.check_output(None)
    with pytest.raises(SpecError) as err:
        g.check_output(3)
    assert err.value.field == "output of task 'noret.g'"
    assert "no return annotation" in err.value.rule
    assert "returned a value of type int" in err.value.rule
    assert err.value.fix == "declare what it returns: `def g(...) -> int:`"


class Opaque:
    pass


def test_unknown_type_rejected_unless_pickling() -> None:
    env = shoal.TaskEnvironment("types")
    with pytest.raises(UnsupportedTypeError) as err:

        @env.task
        def f(x: Opaque) -> int:
            return 1

    assert "allow_pickle" in str(err.value)

    @env.task(allow_pickle=True)
    def g(x: Opaque) -> int:
        return 1

    assert g.allow_pickle


def test_retries_and_timeout_validated() -> None:
    env = shoal.TaskEnvironment("knobs")
    with pytest.raises(SpecError, match="retries"):
        env.task(retries=-1)(lambda: 1)
    with pytest.raises(SpecError, match="timeout"):

        @env.task(timeout=-5)  # 0 means no bound, as in Flyte
        def f() -> int:
            return 1


def test_calling_outside_a_run_calls_the_function() -> None:
    env = shoal.TaskEnvironment("plain")

    @env.task
    def add(a: int, b: int = 2) -> int:
        return a + b

    @env.task
    async def aadd(a: int) -> int:
        return a + 1

    import asyncio

    assert add(1) == 3
    assert asyncio.run(aadd(1)) == 2
    assert not shoal.ctx() and shoal.ctx().rank is None


def test_reachability_through_depends_on() -> None:
    a = shoal.TaskEnvironment("ra")
    b = shoal.TaskEnvironment("rb", depends_on=[a])
    c = shoal.TaskEnvironment("rc", depends_on=[b])
    assert set(c.reachable()) == {"ra", "rb", "rc"}
    assert set(a.reachable()) == {"ra"}
    assert c.spec().reachable == frozenset({"ra", "rb", "rc"})


def test_cache_objects() -> None:
    c = shoal.Cache(version="v2", ignored_inputs="seed", salt="s")
    assert c.ignored_inputs == ("seed",)
    with pytest.raises(SpecError, match="ignored_inputs"):
        shoal.Cache(ignored_inputs=["not a name"])
