"""A whole run against the S3 path: inputs, Dir uploads, blobs and the cache all live in a real
S3-protocol server on loopback (moto, started by the tests), read by real worker processes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._storage.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.s3]

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"


def _load_pipeline() -> object:
    spec = importlib.util.spec_from_file_location("pipeline", PIPELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pipeline"] = module
    spec.loader.exec_module(module)
    return module


def test_pipeline_on_s3_store_with_cache(s3_root: str, monkeypatch: pytest.MonkeyPatch,
                                         shoal_home: Path) -> None:
    monkeypatch.setenv(contract.STORE, s3_root)
    pipeline = _load_pipeline()
    first = shoal.run(pipeline.main, shards=2)  # type: ignore[attr-defined]
    out = first.outputs()[0]
    assert out["shards"] == 2 and out["words"] > 10_000
    store = open_store(s3_root)
    keys = store.list(s3_root)
    assert any("/cache/data.prepare/" in k for k in keys), keys
    assert any("/data/" in k and k.endswith("shard-001.json") for k in keys), keys
    local = shoal_home / "store"  # made (empty, private) with the home; nothing written there
    assert not local.exists() or not any(local.iterdir()), \
        "the file:// store was used instead of S3"
    second = shoal.run(pipeline.main, shards=2)  # type: ignore[attr-defined]
    assert second.outputs()[0] == out
    from shoal._storage.records import Records

    action = Records(shoal_home / "shoal.db").get_action(second.name, "a0.1")
    assert action.state == "cached"
