"""`shoal.remote`: Flyte code's `import flyte.remote` works; using it refuses in one line."""

from __future__ import annotations

import pytest

import shoal
import shoal.remote
from shoal.errors import SpecError


def test_a_remote_name_imports_and_refuses_when_used() -> None:
    details = shoal.remote.ActionDetails
    with pytest.raises(SpecError) as err:
        details.get(run_name="r-1", name="a0")
    text = str(err.value)
    assert "\n" not in text and "ActionDetails.get" in text and "shoal runs RUN" in text
    with pytest.raises(SpecError, match="Run"):
        shoal.remote.Run(name="x")


def test_dunder_lookups_stay_attribute_errors() -> None:
    with pytest.raises(AttributeError):
        shoal.remote.__wrapped__  # noqa: B018  (what inspect and copy look up)
    assert not hasattr(shoal.remote.Run, "__wrapped__")
    assert hasattr(shoal.remote.Run, "get")  # a lookup is fine (port checkers do it)
    with pytest.raises(SpecError, match=r"Run\.pb2"):
        shoal.remote.Run.pb2[0]
