"""Flyte 2's ``File``/``Dir`` surface: streaming ``open``, ``new_remote``, cache keys, ``walk``.

On a file:// store and on the loopback S3 server (``shoal_env``), like test_io.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from shoal._api.io import Dir, File
from shoal._storage import codecs
from shoal._storage.store import join, open_store
from shoal.errors import ObjectNotFound, SpecError

FILES = {"a.txt": b"alpha", "b.csv": b"x,y\n1,2\n", "sub/c.txt": b"gamma",
         "sub/deep/d.txt": b"delta"}


def _tree(root: Path) -> Path:
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_new_remote_written_with_open_sync_then_read_in_blocks(shoal_env: str) -> None:
    f = File.new_remote("out.bin")
    assert f.name == "out.bin" and f.hash is None and f.path.startswith(shoal_env + "/written/")
    assert File.new_remote("out.bin").path != f.path  # a fresh prefix per call
    assert not f.exists_sync()
    data = os.urandom(300_000)
    with f.open_sync("wb", block_size=64 * 1024) as fh:
        for i in range(0, len(data), 70_000):
            fh.write(data[i : i + 70_000])
    assert f.exists_sync()
    with f.open_sync("rb", block_size=64 * 1024) as fh:
        assert fh.read(5) == data[:5]
        fh.seek(200_000)
        assert fh.read(100) == data[200_000:200_100]
        assert fh.read() == data[200_100:]
    assert Path(f.download_sync()).read_bytes() == data


def test_async_open_text_and_lines(shoal_env: str, tmp_path: Path) -> None:
    async def main() -> File:
        f = File.new_remote("notes.txt")
        async with f.open("w") as fh:
            await fh.write("header\n")
            await fh.writelines(["1.5\n", "2.5\n"])
        async with f.open() as fh:  # "rb" by default, as Flyte's
            assert await fh.readline() == b"header\n"
            assert [float(x) for x in await fh.readlines()] == [1.5, 2.5]
        async with f.open("r") as fh:
            assert [line async for line in fh] == ["header\n", "1.5\n", "2.5\n"]
        return f

    f = asyncio.run(main())
    assert open_store().get_bytes(f.path) == b"header\n1.5\n2.5\n"


def test_a_failed_block_publishes_nothing(shoal_env: str) -> None:
    f = File.new_remote("never.bin")

    async def main() -> None:
        async with f.open("wb") as fh:
            await fh.write(b"half")
            raise KeyError("stop")

    with pytest.raises(KeyError):
        asyncio.run(main())
    assert not f.exists_sync()
    with pytest.raises(ObjectNotFound):
        asyncio.run(_read(f))


async def _read(f: File) -> bytes:
    async with f.open("rb") as fh:
        return bytes(await fh.read())


def test_open_refuses_what_a_store_cannot_do(shoal_env: str) -> None:
    f = File.new_remote("x")
    for kwargs, match in (({"mode": "ab"}, "append"), ({"mode": "x"}, "must be one of"),
                          ({"compression": "gzip"}, "compress"), ({"bogus": 1}, "unknown"),
                          ({"block_size": 0}, "positive")):
        with pytest.raises(SpecError, match=match), f.open_sync(**kwargs):  # type: ignore[arg-type]
            pass
    with f.open_sync("wb", cache_type="readahead", cache_options={}) as fh:  # fsspec hints
        fh.write(b"ok")


def test_existing_remote_with_a_cache_key(shoal_env: str, tmp_path: Path) -> None:
    store = open_store()
    uri = join(store.root, "raw", "r.txt")
    store.put_bytes(uri, b"v1")
    f = File.from_existing_remote(uri, file_cache_key="release-1")
    assert f.hash == "release-1" and asyncio.run(_read(f)) == b"v1"
    # The key promises the content: the download is cached under it and reused.
    first = f.download_sync()
    store.put_bytes(uri, b"v2")
    assert f.download_sync() == first and Path(first).read_bytes() == b"v1"
    assert Path(File.from_existing_remote(uri).download_sync()).read_bytes() == b"v2"
    src = tmp_path / "k.txt"
    src.write_bytes(b"k")
    assert File.from_local_sync(src, hash_method="mykey").hash == "mykey"
    with pytest.raises(SpecError, match="precomputed cache key"):
        File.new_remote(hash_method=hashlib.sha256)  # type: ignore[arg-type]


def test_walk_recursion_depth_and_pattern(shoal_env: str, tmp_path: Path) -> None:
    uploaded = Dir.from_local_sync(_tree(tmp_path / "ds"))
    elsewhere = Dir.from_local_sync(_tree(tmp_path / "ds2"),
                                    remote_destination=join(shoal_env, "mine"))
    for d in (uploaded, elsewhere):  # with a manifest, and listed from the store
        def rel(files: list[File], d: Dir = d) -> list[str]:
            return [f.path[len(d.path) + 1 :] for f in files]

        assert rel(list(d.walk_sync())) == sorted(FILES)
        assert rel(list(d.walk_sync(recursive=False))) == ["a.txt", "b.csv"]
        assert rel(list(d.walk_sync(max_depth=2))) == ["a.txt", "b.csv", "sub/c.txt"]
        assert rel(list(d.walk_sync(file_pattern="*.txt"))) == [
            "a.txt", "sub/c.txt", "sub/deep/d.txt"]
        assert rel(d.list_files_sync()) == ["a.txt", "b.csv"]

        async def walk(d: Dir = d) -> tuple[list[File], list[File]]:
            top = [f async for f in d.walk(recursive=False)]
            return top, await d.list_files()

        top, listed = asyncio.run(walk())
        assert rel(top) == rel(listed) == ["a.txt", "b.csv"]
        got = d.get_file_sync("sub/c.txt")
        assert got is not None and asyncio.run(_read(got)) == b"gamma"
        assert d.get_file_sync("missing.txt") is None
        assert asyncio.run(d.exists())
    # Files from a manifest carry their hash.
    assert [f.hash for f in uploaded.list_files_sync()] == [
        hashlib.sha256(FILES[r]).hexdigest() for r in ("a.txt", "b.csv")]
    with pytest.raises(SpecError, match="max_depth"):
        list(uploaded.walk_sync(max_depth=0))


def test_dir_new_remote_filled_by_streams(shoal_env: str) -> None:
    d = Dir.new_remote("outputs")
    assert d.name == "outputs" and not d.exists_sync()
    for name in ("one.txt", "sub/two.txt"):
        with File.from_existing_remote(join(d.path, name)).open_sync("w") as fh:
            fh.write(name)
    assert d.exists_sync()
    assert [f.name for f in d.walk_sync()] == ["one.txt", "two.txt"]
    local = Path(Dir.from_existing_remote(d.path).download_sync())
    assert (local / "sub" / "two.txt").read_text() == "sub/two.txt"
    d2 = Dir.from_existing_remote(d.path, dir_cache_key="v1")
    assert d2.hash == "v1" and len(d2.listing_sync()) == 2


def test_format_parameters_and_labels(shoal_env: str, tmp_path: Path) -> None:
    assert File["csv"] is File and File[Literal["csv"]] is File and Dir["parquet"] is Dir
    src = tmp_path / "t.csv"
    src.write_text("a\n")
    f = File[Literal["csv"]].from_local_sync(src)
    assert isinstance(f, File) and f.format == ""
    labelled = File(f.path, format="csv")
    # A task value: the label travels with the reference (hint File["csv"] is plain File).
    literal = codecs.encode(labelled, File[Literal["csv"]], blobs=None, field="out")
    assert codecs.decode(literal, File, blobs=None, field="out") == labelled
    assert literal["format"] == "csv" and Dir(f.path, format="csv").format == "csv"


_BOUNDED = """
import hashlib, os, sys
from shoal._api.io import File
def peak():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
block = os.urandom(1 << 20)
f = File.new_remote("big.bin")
with File.new_remote("warm").open_sync("wb") as w:  # import and start everything first
    w.write(block * 6)
base = peak()
with f.open_sync("wb", block_size=5 << 20) as fh:
    for _ in range({mib}):
        fh.write(block)
with f.open_sync("rb") as fh:
    h = hashlib.sha256()
    while chunk := fh.read(1 << 20):
        h.update(chunk)
grew = (peak() - base) // 1024
want = hashlib.sha256()
for _ in range({mib}):
    want.update(block)
assert h.hexdigest() == want.hexdigest()
print(grew)
"""


def test_streaming_a_large_file_keeps_memory_bounded(shoal_env: str, tmp_path: Path) -> None:
    """96 MiB written and read back through ``open_sync`` in 5 MiB blocks: the peak RSS grows
    by a few blocks (measured: ~24 MiB on S3, ~0 on file://), not by the object."""
    mib = 96
    out = subprocess.run([sys.executable, "-c", _BOUNDED.format(mib=mib)], capture_output=True,
                         text=True, env=os.environ.copy(), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    grew = int(out.stdout.strip())
    assert grew < mib // 2, f"peak RSS grew by {grew} MiB streaming {mib} MiB"


def test_named_remote_needs_a_task(shoal_env: str) -> None:
    with pytest.raises(SpecError, match="new_remote"):
        File.named_remote("x.csv")


def test_dir_from_local_with_batch_size_and_cache_key(shoal_env: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "ds")
    plain = Dir.from_local_sync(src)
    keyed = asyncio.run(Dir.from_local(src, dir_cache_key="ds-v1", batch_size=2))
    assert keyed.path == plain.path and keyed.hash == "ds-v1"  # same content, same place
    assert [f.path for f in keyed.walk_sync()] == [f.path for f in plain.walk_sync()]
    with pytest.raises(SpecError, match="batch_size"):
        Dir.from_local_sync(src, batch_size=0)
