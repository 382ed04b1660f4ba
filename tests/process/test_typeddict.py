"""TypedDicts between real task processes: absent NotRequired keys stay absent."""

from __future__ import annotations

import pytest

import shoal
from shoal.errors import InputError

from .programs import typeddict_tasks as p

pytestmark = pytest.mark.slow


def test_a_typeddict_passes_between_tasks() -> None:
    without, with_calls = shoal.run(p.pipeline).outputs()
    assert without == "hi Address:SF absent"
    assert with_calls == "hi Address:SF ['search']"


def test_a_dict_lacking_a_required_key_fails_at_the_call() -> None:
    with pytest.raises(InputError) as err:
        shoal.run(p.read, {"content": "hi"})
    assert err.value.field == "input 'reply.address' of task 'tdict.read'"
