"""The registry where engines find a plugin's engine-side parts by the type of its config.

No plugin ships yet, so the configs and parts here are the test's own: plain classes, with the
registry itself real."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from shoal._plugins import NEUTRAL, part_for, register
from shoal.errors import ShoalSystemError


@dataclass(frozen=True)
class Part:
    engine: str


def test_a_registered_part_is_found_by_its_configs_type_and_engine() -> None:
    @dataclass(frozen=True)
    class Config:
        n: int = 1

    local, neutral = Part("local"), Part(NEUTRAL)
    register(Config, "local", local)
    register(Config, NEUTRAL, neutral)
    register(Config, "local", local)  # a module imported twice: the same part again
    assert part_for(Config(), "local", Part) is local
    assert part_for(Config(), NEUTRAL, Part) is neutral
    assert part_for(Config(), "kubernetes", Part) is None  # this plugin needs no part there


def test_a_subclass_of_a_config_finds_its_bases_parts() -> None:
    class Config:
        pass

    class Tuned(Config):
        pass

    part = Part("slurm")
    register(Config, "slurm", part)
    assert part_for(Tuned(), "slurm", Part) is part


def test_two_parts_for_one_config_and_engine_are_refused() -> None:
    class Config:
        pass

    register(Config, "local", Part("local"))
    with pytest.raises(ShoalSystemError, match="two local parts registered for"):
        register(Config, "local", Part("local"))


def test_a_part_of_the_wrong_kind_is_refused() -> None:
    class Config:
        pass

    register(Config, "local", "not a part")
    with pytest.raises(ShoalSystemError, match="is a str, not a Part"):
        part_for(Config(), "local", Part)


def test_a_config_of_an_unknown_type_has_no_part() -> None:
    class Config:
        pass

    assert part_for(Config(), "local", Part) is None


def test_a_plugins_config_without_engine_parts_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config defined under shoal.plugins.<name> makes the registry look for
    shoal._plugins.<name>; none exists for this name, so nothing is imported."""
    class Config:
        pass

    monkeypatch.setattr(Config, "__module__", "shoal.plugins.no_such_plugin")
    assert part_for(Config(), "local", Part) is None
