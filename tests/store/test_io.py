"""``File`` and ``Dir``: uploads, content addressing, cached downloads, listings.

Each test runs on a file:// store and on the loopback S3 server (``shoal_env`` points
SHOAL_STORE at one of them and SHOAL_HOME at tmp).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._api.io import Dir, File
from shoal._storage.store import join, open_store
from shoal.errors import NotFoundError, SpecError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


FILES = {"a.txt": b"alpha", "sub/b.bin": os.urandom(3000), "sub/deep/c.txt": b"gamma"}


def _read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_file_round_trip_is_content_addressed(shoal_env: str, tmp_path: Path) -> None:
    src = tmp_path / "one" / "weights.bin"
    src.parent.mkdir()
    src.write_bytes(b"w" * 1000)
    f = File.from_local_sync(src)
    assert f.path == join(shoal_env, "data", _sha(b"w" * 1000), "weights.bin")
    assert (f.name, f.hash) == ("weights.bin", _sha(b"w" * 1000))
    # Same bytes and name elsewhere: the same reference.
    twin = tmp_path / "two" / "weights.bin"
    twin.parent.mkdir()
    twin.write_bytes(b"w" * 1000)
    assert File.from_local_sync(twin) == f
    other = tmp_path / "two" / "other.bin"
    other.write_bytes(b"x")
    assert File.from_local_sync(other).hash != f.hash
    local = Path(f.download_sync())
    assert local.read_bytes() == b"w" * 1000
    assert local.is_relative_to(contract.home() / "downloads")


def test_uploading_existing_content_is_skipped(shoal_env: str, tmp_path: Path) -> None:
    src = tmp_path / "f.txt"
    src.write_bytes(b"content")
    f = File.from_local_sync(src)
    # Overwrite the stored object behind Shoal's back: a skipped upload leaves it so.
    store = open_store()
    store.put_bytes(f.path, b"marker")
    assert File.from_local_sync(src) == f
    assert store.get_bytes(f.path) == b"marker"


def test_download_is_cached_and_never_the_stores_own_file(shoal_env: str, tmp_path: Path) -> None:
    src = tmp_path / "f.txt"
    src.write_bytes(b"original")
    f = File.from_local_sync(src)
    first = Path(f.download_sync())
    store = open_store()
    assert first != store.local_path(f.path)
    first.write_bytes(b"edited by the user")
    assert store.get_bytes(f.path) == b"original"
    # Cached: the second download does not fetch (the store object can even be gone).
    store.delete(f.path)
    assert f.download_sync() == str(first)
    # An explicit destination: a file path, or a folder that receives the file by name.
    store.put_bytes(f.path, b"original")
    assert Path(f.download_sync(tmp_path / "x.txt")).read_bytes() == b"original"
    (tmp_path / "folder").mkdir()
    assert f.download_sync(tmp_path / "folder") == str(tmp_path / "folder" / "f.txt")


def test_dir_round_trip_and_hash(shoal_env: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "dataset", FILES)
    d = Dir.from_local_sync(src)
    assert d.name == "dataset"
    assert d.hash is not None and d.path == join(shoal_env, "data", d.hash)
    # The same content in another folder (written in another order): the same reference path
    # and hash; one byte changed or one file renamed: another hash.
    again = _tree(tmp_path / "elsewhere" / "dataset", dict(reversed(FILES.items())))
    assert Dir.from_local_sync(again) == d
    changed = _tree(tmp_path / "changed", {**FILES, "a.txt": b"alphA"})
    renamed = _tree(
        tmp_path / "renamed", {"A.txt" if k == "a.txt" else k: v for k, v in FILES.items()}
    )
    assert len({d.hash, Dir.from_local_sync(changed).hash, Dir.from_local_sync(renamed).hash}) == 3
    local = Path(d.download_sync())
    assert _read_tree(local) == FILES
    assert local.is_relative_to(contract.home() / "downloads")
    assert Path(d.download_sync(tmp_path / "mine")) == tmp_path / "mine"
    assert _read_tree(tmp_path / "mine") == FILES


def test_dir_download_is_cached_and_shared_by_concurrent_callers(
    shoal_env: str, tmp_path: Path
) -> None:
    d = Dir.from_local_sync(_tree(tmp_path / "ds", FILES))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(d.download_sync())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and _read_tree(Path(results[0])) == FILES
    assert Path(results[0] + ".complete").exists()
    # Complete, so reused without touching the store.
    store = open_store()
    for uri in store.list(d.path):
        store.delete(uri)
    assert _read_tree(Path(d.download_sync())) == FILES


def test_dir_listing_gives_file_refs_with_hashes(shoal_env: str, tmp_path: Path) -> None:
    d = Dir.from_local_sync(_tree(tmp_path / "ds", FILES))
    files = d.listing_sync()
    assert [f.path for f in files] == [join(d.path, rel) for rel in sorted(FILES)]
    assert [f.hash for f in files] == [_sha(FILES[rel]) for rel in sorted(FILES)]
    assert [f.name for f in files] == ["a.txt", "b.bin", "c.txt"]
    # A reader fetches only the file it opens.
    b = files[1]
    assert Path(b.download_sync()).read_bytes() == FILES["sub/b.bin"]
    assert list(d.walk_sync()) == files


def test_async_api(shoal_env: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "ds", FILES)

    async def main() -> None:
        d = await Dir.from_local(src)
        f = await File.from_local(src / "a.txt")
        assert [g async for g in d.walk()] == await d.listing()
        assert _read_tree(Path(await d.download())) == FILES
        assert Path(await f.download()).read_bytes() == b"alpha"
        assert await f.exists() and await d.exists()

    asyncio.run(main())


def test_explicit_remote_destination(shoal_env: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "ds", FILES)
    target = join(shoal_env, "mine", "ds")
    d = Dir.from_local_sync(src, remote_destination=target)
    assert d.path == target and d.hash is not None
    # No manifest at a destination the user chose: the listing comes from the store.
    assert [f.path for f in d.listing_sync()] == [join(target, r) for r in sorted(FILES)]
    f = File.from_local_sync(src / "a.txt", remote_destination=join(shoal_env, "mine", "a"))
    assert f.path == join(shoal_env, "mine", "a") and f.name == "a.txt"
    assert Path(f.download_sync()).read_bytes() == b"alpha"


def test_existing_remote_without_hash_is_downloaded_afresh(shoal_env: str, tmp_path: Path) -> None:
    store = open_store()
    prefix = join(store.root, "raw")
    store.put_bytes(join(prefix, "x"), b"1")
    d = Dir.from_existing_remote(prefix)
    assert d.hash is None and d.name == "raw"
    assert _read_tree(Path(d.download_sync())) == {"x": b"1"}
    store.put_bytes(join(prefix, "x"), b"2")
    store.put_bytes(join(prefix, "y"), b"3")
    assert _read_tree(Path(d.download_sync())) == {"x": b"2", "y": b"3"}
    f = File.from_existing_remote(join(prefix, "y"))
    assert f.name == "y" and Path(f.download_sync()).read_bytes() == b"3"


def test_empty_dir(shoal_env: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    d = Dir.from_local_sync(tmp_path / "empty")
    assert d.listing_sync() == []
    local = Path(d.download_sync())
    assert local.is_dir() and list(local.iterdir()) == []


def test_bad_references() -> None:
    with pytest.raises(SpecError, match=r"File\.path"):
        File("relative/path.txt")
    with pytest.raises(SpecError, match=r"Dir\.path"):
        Dir("http://host/x")
    with pytest.raises(NotFoundError):
        File.from_local_sync("/definitely/not/here")
    with pytest.raises(NotFoundError):
        Dir.from_local_sync("/definitely/not/here")
