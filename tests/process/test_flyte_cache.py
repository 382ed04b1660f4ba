"""Flyte 2's cache settings on real runs: a version you give keys the cache (`"override"`),
and `serialize=True` runs identical calls of a run once."""

from __future__ import annotations

from pathlib import Path

import pytest

import shoal

from .programs import flyte_cache as fc

pytestmark = pytest.mark.slow


def runs(folder: Path) -> int:
    return len(list(folder.glob("ran-*")))


def test_override_behavior_caches_on_the_given_version(tmp_path: Path) -> None:
    assert shoal.run(fc.versioned, str(tmp_path), 1).outputs()[0] == 2
    assert shoal.run(fc.versioned, str(tmp_path), 1).outputs()[0] == 2
    assert runs(tmp_path) == 1  # the second run was a cache hit


def test_serialize_runs_identical_calls_of_a_run_once(tmp_path: Path) -> None:
    assert shoal.run(fc.fan, str(tmp_path), True).outputs()[0] == [9] * 4
    assert runs(tmp_path) == 1


def test_without_serialize_identical_calls_race(tmp_path: Path) -> None:
    """The control: the same fan-out without serialize runs the call more than once (the
    calls start together, before any has written its cache entry)."""
    assert shoal.run(fc.fan, str(tmp_path), False).outputs()[0] == [9] * 4
    assert runs(tmp_path) > 1
