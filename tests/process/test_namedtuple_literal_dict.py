"""NamedTuples, Literals and dicts-for-models between real task processes, as Flyte 2's
examples pass them: through shoal.run, task calls inside a task, and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import shoal
from shoal.errors import InputError

from .programs import namedtuple_literal_dict as p

pytestmark = pytest.mark.slow


def test_namedtuples_literals_and_dicts_pass_between_tasks() -> None:
    out = shoal.run(p.pipeline).outputs()
    assert out.named_outputs.keys() == {"trip", "described", "asked"}  # Flyte's named outputs
    trip = out.trip
    assert type(trip) is p.Trip and type(trip.start) is p.Point
    assert trip.start == p.Point(1.0, 2.0, 7.0) and trip.home == p.Address("SF", 94105)
    assert trip.stops == [p.Point(3.0, 4.0, 0.0), p.Point(5.0, 6.0, 1.0)]
    assert out.described == ("1.0,2.0,7.0 -> 2 stops, home SF, notes 'bring water', "
                             "level high, mixed <Color.RED: 'red'>")
    assert out.asked == "q1/default/{'k': 'v'} q2/default/LA"


def test_a_value_outside_a_literal_and_a_bad_dict_fail_at_the_call() -> None:
    with pytest.raises(InputError) as err:
        shoal.run(p.level_only, "extreme", 3)
    assert err.value.field == "input 'level' of task 'ntlit.level_only'"
    assert "expected one of 'low', 'medium', 'high'" in err.value.rule
    with pytest.raises(InputError) as err:
        shoal.run(p.ask, {"name": "x"}, {"query": "q", "home": {"city": "LA"}})
    assert err.value.field == "input 'query.query' of task 'ntlit.ask'"
    assert "Query rejected the dict" in err.value.rule


def test_the_cli_takes_literal_choices() -> None:
    def shoal_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", p.__file__,
                               "level_only", *args], capture_output=True, text=True,
                              timeout=120, env=os.environ.copy())

    ok = shoal_cli("--level", "medium", "--mixed", "RED")
    assert ok.returncode == 0, ok.stderr
    assert "medium <Color.RED: 'red'>" in ok.stdout
    bad = shoal_cli("--level", "extreme", "--mixed", "3")
    assert bad.returncode != 0
    assert "is not one of the allowed values (low, medium, high)" in bad.stderr
