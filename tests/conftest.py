"""Shared fixtures: every test gets its own SHOAL_HOME and file:// store."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal._runtime import contract


@pytest.fixture(autouse=True)
def shoal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "shoal-home"
    monkeypatch.setenv(contract.HOME, str(home))
    monkeypatch.setenv(contract.STORE, (home / "store").as_uri())
    monkeypatch.setenv(contract.RETRY_BACKOFF, "0.05")
    monkeypatch.delenv(contract.ENGINE, raising=False)
    return home
