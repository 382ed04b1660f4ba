"""An elastic gang whose MAX does not fit this machine but whose MIN does is accepted and
starts with the nodes that fit (`limits.fitting_nodes`), real processes and gloo."""

from __future__ import annotations

from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.records import Records

from .programs import elastic_fit

pytestmark = pytest.mark.slow
pytest.importorskip("torch")


def test_an_elastic_gang_past_the_machine_at_max_starts_with_what_fits(
        monkeypatch: pytest.MonkeyPatch, shoal_home: Path) -> None:
    # 512Mi holds 2 ranks (gangs/limits.py: RANK_MEMORY): MIN 1 fits, MAX 4 does not.
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=4,memory=512Mi")
    run = shoal.run(elastic_fit.world)
    assert run.outputs()[0] == {"world": 2, "summed": 2, "nnodes": 2, "max": 4}
    started = [e.data for e in Records(shoal_home / "shoal.db").events(run.name)
               if e.kind == "gang_started" and isinstance(e.data, dict)]
    assert [(s["nnodes"], s["min_nnodes"], s["max_nnodes"]) for s in started] == [(2, 1, 4)]
