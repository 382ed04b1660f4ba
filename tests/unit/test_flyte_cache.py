"""`shoal.Cache` takes Flyte 2's arguments with Flyte's meaning."""

from __future__ import annotations

import pytest

import shoal
from shoal.errors import SpecError


def test_version_override_is_the_version() -> None:
    c = shoal.Cache(behavior="override", version_override="v4")
    assert (c.behavior, c.version) == ("override", "v4")
    assert shoal.Cache("auto", version="v1", version_override="v1").version == "v1"


def test_override_needs_a_version() -> None:
    with pytest.raises(SpecError, match=r"override.*version"):
        shoal.Cache("override")


def test_two_versions_that_differ_are_refused() -> None:
    with pytest.raises(SpecError, match="version_override"):
        shoal.Cache("auto", version="v1", version_override="v2")


def test_custom_policies_are_refused_with_the_alternative() -> None:
    with pytest.raises(SpecError, match=r"policies.*version="):
        shoal.Cache("auto", policies=[object()])


def test_serialize_reaches_the_spec() -> None:
    env = shoal.TaskEnvironment(name="cser", cache=shoal.Cache("auto", serialize=True))
    assert env.cache_spec(None).serialize is True
    with pytest.raises(SpecError, match="serialize"):
        shoal.Cache("auto", serialize="yes")  # type: ignore[arg-type]
