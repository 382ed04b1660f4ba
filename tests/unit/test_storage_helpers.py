"""`shoal.storage`: Flyte's `flyte.storage` helpers, over the store of this test's home."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import shoal.storage as storage
from shoal.errors import SpecError


def test_put_get_and_exists_round_trip_a_file_and_a_folder(shoal_home: Path,
                                                           tmp_path: Path) -> None:
    src = tmp_path / "model.bin"
    src.write_bytes(b"weights")
    uri = asyncio.run(storage.put(src))
    assert uri.startswith((shoal_home / "store" / "data").as_uri())
    assert asyncio.run(storage.exists(uri)) and storage.exists_sync(uri)
    back = asyncio.run(storage.get(uri))
    assert Path(back).read_bytes() == b"weights" and Path(back).name == "model.bin"
    folder = tmp_path / "shards"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "0.txt").write_text("zero")
    (folder / "1.txt").write_text("one")
    dest = asyncio.run(storage.put(folder, recursive=True))
    out = Path(asyncio.run(storage.get(dest, tmp_path / "copy", recursive=True)))
    assert (out / "a" / "0.txt").read_text() == "zero" and (out / "1.txt").read_text() == "one"
    assert not storage.exists_sync(storage.join(dest, "missing.txt"))


def test_paths_and_what_is_refused() -> None:
    assert storage.is_remote("s3://bucket/x") and not storage.is_remote("/tmp/x")
    assert not storage.is_remote("file:///tmp/x")
    assert storage.join("s3://b/p", "q", "r.txt") == "s3://b/p/q/r.txt"
    assert storage.get_random_local_path("x.csv").name == "x.csv"
    with pytest.raises(SpecError, match="SHOAL_STORE"):
        storage.S3  # noqa: B018
    with pytest.raises(AttributeError):
        storage.nothing_like_this  # noqa: B018
