"""Fixtures for the store tests: a store root per backend (the S3 server is in ../conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._storage.store import Store, open_store

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def store_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The root of an empty store, once per backend."""
    if request.param == "file":
        return (tmp_path / "store").as_uri()
    return str(request.getfixturevalue("s3_root"))


@pytest.fixture
def store(store_root: str) -> Store:
    return open_store(store_root)


@pytest.fixture
def shoal_env(store_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """SHOAL_HOME in tmp and SHOAL_STORE at ``store_root``; returns the store root."""
    monkeypatch.setenv(contract.HOME, str(tmp_path / "home"))
    monkeypatch.setenv(contract.STORE, store_root)
    return store_root


@pytest.fixture
def child_env() -> dict[str, str]:
    """The environment for a child Python that imports Shoal from this checkout."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{path}" if path else str(SRC)}
