"""`Run.outputs()` has Flyte 2's tuple shape (``ActionOutputs``)."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import pytest

from shoal._driver.outputs import RunOutputs


class Pair(NamedTuple):
    loss: float
    steps: int


def test_one_output_is_a_one_tuple() -> None:
    out = RunOutputs.of("abc", str)
    assert out == ("abc",) and out[0] == "abc" and out.o0 == "abc"
    assert out.named_outputs == {"o0": "abc"}


def test_a_tuple_return_is_one_output_per_element() -> None:
    a, b = RunOutputs.of((1, "x"), tuple[int, str])
    assert (a, b) == (1, "x")
    assert RunOutputs.of((1, "x"), tuple[int, str]).o1 == "x"


def test_a_named_tuple_names_its_outputs() -> None:
    out = RunOutputs.of(Pair(0.5, 10), Pair)
    assert out.named_outputs == {"loss": 0.5, "steps": 10}
    assert out.steps == 10


def test_none_and_lists_stay_one_output() -> None:
    assert RunOutputs.of(None, None) == (None,)
    assert RunOutputs.of([1, 2], list[int]) == ([1, 2],)


def test_an_unknown_output_name_says_which_exist() -> None:
    with pytest.raises(AttributeError, match="has o0"):
        _ = RunOutputs.of(1, int).o3


def test_it_pickles() -> None:
    out = RunOutputs.of(Pair(0.5, 10), Pair)
    back = pickle.loads(pickle.dumps(out))
    assert back == out and back.named_outputs == out.named_outputs
