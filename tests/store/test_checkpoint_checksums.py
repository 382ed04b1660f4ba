"""Checkpoint checksums: CRC32C in new commits, sha256 commits of older Shoal still loading, and
corruption caught on every read path (file://, and s3:// through parallel ranged GETs)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from shoal._storage.checkpoints import Checkpoint, checksums
from shoal._storage.checkpoints.hashing import CHUNK
from shoal._storage.store import Store, join, store_for
from shoal.errors import StoreError

MiB = 1024 * 1024


def _uri(root: str) -> str:
    return join(root, "checkpoints", "run-1", "a0")


def _commit(cp: Checkpoint, step: int) -> tuple[Store, str, dict[str, Any]]:
    store = store_for(cp.uri)
    uri = join(cp.uri, f"v{step:012d}.commit.json")
    return store, uri, json.loads(store.get_bytes(uri))


def _object(cp: Checkpoint, step: int, path: str) -> str:
    _, _, doc = _commit(cp, step)
    (entry,) = [o for o in doc["shards"][0]["objects"] if o["path"] == path]
    return join(cp.uri, f"v{step:012d}", entry["key"])


def _flip(store: Store, uri: str, offset: int) -> None:
    """Flip one byte of a stored object, in place on file:// (as a bad disk would)."""
    data = bytearray(store.get_bytes(uri))
    data[offset] ^= 0x01
    local = store.local_path(uri)
    if local is not None:
        local.write_bytes(data)
    else:
        store.put_bytes(uri, bytes(data))


def test_crc32c_combines_pieces_into_the_whole_objects_crc() -> None:
    assert checksums.crc32c(b"123456789") == 0xE3069283  # the CRC32C check value
    data = os.urandom(3 * MiB + 17)
    for cut in (0, 1, MiB, len(data) - 1, len(data)):
        a, b = data[:cut], data[cut:]
        combined = checksums.combine(checksums.crc32c(a), checksums.crc32c(b), len(b))
        assert combined == checksums.crc32c(data)


@pytest.mark.parametrize("inline", [True, False])
def test_spans_landing_in_any_order_combine_into_the_whole_crc(inline: bool) -> None:
    """What a ranged download's parts checksum into, whatever order they land in; a gap
    stops the count there, so a missing span shows as a short object."""
    from shoal._storage.checkpoints.hashing import Spans

    data = os.urandom(5 * MiB + 3)
    cuts = [(0, MiB), (MiB, 3 * MiB), (3 * MiB, 3 * MiB + 1), (3 * MiB + 1, len(data))]
    for order in (cuts, cuts[::-1], [cuts[2], cuts[0], cuts[3], cuts[1]]):
        spans = Spans(memoryview(data), inline=inline)
        for start, end in order:
            spans.landed(start, end)
        assert spans.result() == (len(data), f"{checksums.crc32c(data):08x}")
    spans = Spans(memoryview(data), inline=inline)
    for start, end in (cuts[0], cuts[2], cuts[3]):
        spans.landed(start, end)
    assert spans.result() == (MiB, f"{checksums.crc32c(data[:MiB]):08x}")


def test_a_commit_records_each_objects_crc32c(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    big = os.urandom(2 * CHUNK + 5)  # three pieces, checksummed apart and combined
    cp.save_sync(big)
    (cp.path / "w.bin").write_bytes(big)  # a file's copy checksums its pieces as they pass
    cp.save_sync(cp.path / "w.bin")
    for step, expected in ((0, big), (1, big)):
        _, _, doc = _commit(cp, step)
        (entry,) = doc["shards"][0]["objects"]
        assert entry["crc32c"] == f"{checksums.crc32c(expected):08x}"
        assert "sha256" not in entry and "hash" not in entry


@pytest.mark.parametrize("where", ["first piece", "last piece"])
def test_a_flipped_bit_in_a_large_object_is_caught_by_crc32c(
    store_root: str, tmp_path: Path, where: str
) -> None:
    """On s3:// the load is parallel ranged GETs: the flip lands in one of the ranges."""
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    data = os.urandom(2 * CHUNK + 1000)
    cp.save_sync(data)
    (cp.path / "m.pt").write_bytes(data)
    cp.save_sync(cp.path / "m.pt")
    assert cp.load_sync(step=0) == data
    offset = 10 if where == "first piece" else len(data) - 10
    store = store_for(cp.uri)
    for step, path in ((0, "data"), (1, "m.pt")):
        victim = _object(cp, step, path)
        _flip(store, victim, offset)
        fresh = Checkpoint(cp.uri, local_dir=tmp_path / f"fresh-{step}")
        with pytest.raises(StoreError) as err:
            fresh.load_sync(step=step)
        assert victim in str(err.value) and "is corrupt" in str(err.value)
        assert "crc32c" in str(err.value) and "load(step=...)" in str(err.value)


def test_a_truncated_object_is_caught(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    data = os.urandom(CHUNK + 3)
    cp.save_sync(data)
    store = store_for(cp.uri)
    victim = _object(cp, 0, "data")
    short = store.get_bytes(victim)[:-1]
    local = store.local_path(victim)
    if local is not None:
        local.write_bytes(short)
    else:
        store.put_bytes(victim, short)
    with pytest.raises(StoreError, match=f"records {len(data)} bytes"):
        Checkpoint(cp.uri, local_dir=tmp_path / "fresh").load_sync()


def _as_sha256(doc: dict[str, Any], payloads: dict[str, bytes]) -> None:
    """Rewrite a commit's entries as a Shoal before CRC32C wrote them: a plain sha256 up to
    one 8 MiB piece, else the sha256 of the pieces' sha256s."""
    for entry in doc["shards"][0]["objects"]:
        data = payloads[entry["path"]]
        del entry["crc32c"]
        if len(data) <= CHUNK:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
            continue
        pieces = b"".join(hashlib.sha256(data[i : i + CHUNK]).digest()
                          for i in range(0, len(data), CHUNK))
        entry |= {"hash": "sha256-pieces", "piece_size": CHUNK,
                  "digest": hashlib.sha256(pieces).hexdigest()}


def test_checkpoints_committed_with_sha256_still_load_and_are_verified(
    store_root: str, tmp_path: Path
) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    big, small = os.urandom(2 * CHUNK + 77), b"small and old"
    cp.save_sync(big)
    tree = cp.path / "tree"
    tree.mkdir()
    (tree / "big.bin").write_bytes(big)
    (tree / "small.txt").write_bytes(small)
    cp.save_sync(tree)
    payloads = {"data": big, "big.bin": big, "small.txt": small}
    for step in (0, 1):
        store, uri, doc = _commit(cp, step)
        _as_sha256(doc, payloads)
        store.put_bytes(uri, json.dumps(doc).encode())

    old = Checkpoint(cp.uri, local_dir=tmp_path / "old")
    assert old.load_sync(step=0) == big
    folder = old.load_sync(step=1)
    assert isinstance(folder, Path)
    assert (folder / "big.bin").read_bytes() == big
    assert (folder / "small.txt").read_bytes() == small

    # And a sha256 commit still catches a flipped byte, naming its algorithm.
    store = store_for(cp.uri)
    _flip(store, _object(cp, 0, "data"), CHUNK + 1)
    with pytest.raises(StoreError, match=r"is corrupt: .* sha256-pieces \(8388608-byte pieces\)"):
        Checkpoint(cp.uri, local_dir=tmp_path / "again").load_sync(step=0)


@pytest.mark.s3
def test_a_large_s3_load_is_parallel_ranged_gets(
    s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore

    from shoal._storage.objstore import CHUNK as PART
    from shoal._storage.objstore import ObjectStore

    monkeypatch.setattr(ObjectStore, "parallelism", 4)  # 8 MiB parts for this object
    cp = Checkpoint(_uri(s3_root), local_dir=tmp_path / "local")
    data = os.urandom(3 * PART + 1)
    cp.save_sync(data)
    asked: list[tuple[tuple[int, int] | None, str | None]] = []
    real = obstore.get

    def spy(store: Any, key: str, *, options: Any = None) -> Any:
        if key.endswith("/data"):
            options = options or {}
            asked.append((options.get("range"), options.get("if_match")))
        return real(store, key, options=options)

    monkeypatch.setattr(obstore, "get", spy)
    assert Checkpoint(cp.uri, local_dir=tmp_path / "fresh").load_sync() == data
    assert sorted(r for r, _ in asked if r is not None) == [
        (0, PART), (PART, 2 * PART), (2 * PART, 3 * PART), (3 * PART, 3 * PART + 1)]
    assert None not in [r for r, _ in asked]  # no whole-object GET besides the ranges
    # All but the first are pinned to the ETag the first one saw.
    etags = [tag for r, tag in asked if r != (0, PART)]
    assert len(etags) == 3 and len(set(etags)) == 1 and etags[0]


@pytest.mark.s3
def test_an_s3_object_longer_than_its_commit_is_caught(s3_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(s3_root), local_dir=tmp_path / "local")
    data = os.urandom(2 * CHUNK)
    cp.save_sync(data)
    store = store_for(cp.uri)
    store.put_bytes(_object(cp, 0, "data"), data + b"!")
    with pytest.raises(StoreError, match=f"records {len(data)} bytes .* holds {len(data) + 1}"):
        Checkpoint(cp.uri, local_dir=tmp_path / "fresh").load_sync()


# --- loads read straight into the bytes they return ----------------------------------------


@pytest.fixture
def no_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of every LoadedBytes made by copying (``LoadedBytes(data)``): a load that
    fills its result in place makes none."""
    from shoal._storage.checkpoints.loaded_bytes import LoadedBytes

    copies: list[int] = []
    real = bytes.__new__

    def new(cls: type, *args: Any) -> Any:
        copies.append(len(args[0]) if args else 0)
        return real(cls, *args)

    monkeypatch.setattr(LoadedBytes, "__new__", new)
    return copies


@pytest.mark.parametrize("size", [5, 2 * MiB + 1, 2 * CHUNK + 3])
def test_a_bytes_load_is_read_into_the_bytes_it_returns(
    store_root: str, tmp_path: Path, size: int, no_copies: list[int]
) -> None:
    """Small (checksummed inline), pooled, and (on s3://) ranged: verified, no second copy."""
    from shoal._storage.checkpoints.loaded_bytes import LoadedBytes

    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    data = os.urandom(size)
    cp.save_sync(data)
    got = Checkpoint(cp.uri, local_dir=tmp_path / "fresh").load_sync()
    assert type(got) is LoadedBytes and got == data and hash(got) == hash(data)
    assert got.read_bytes() == data
    assert no_copies == []


@pytest.mark.s3
@pytest.mark.parametrize("size", [5, 2 * CHUNK + 3])
def test_an_s3_load_with_ranged_gets_off_is_one_get_into_the_result(
    s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int,
    no_copies: list[int],
) -> None:
    import obstore

    cp = Checkpoint(_uri(s3_root), local_dir=tmp_path / "local")
    data = os.urandom(size)
    cp.save_sync(data)
    store = store_for(cp.uri)
    monkeypatch.setattr(store, "ranged_get_min", None)  # SHOAL_RANGED_GET_MIN_MIB=off
    asked: list[Any] = []
    real = obstore.get

    def spy(store: Any, key: str, *, options: Any = None) -> Any:
        if key.endswith("/data"):
            asked.append(options)
        return real(store, key, options=options)

    monkeypatch.setattr(obstore, "get", spy)
    assert Checkpoint(cp.uri, local_dir=tmp_path / "fresh").load_sync() == data
    assert asked == [None] and no_copies == []
    # Corruption and a wrong size are still caught, with the same errors as ranged loads.
    _flip(store, _object(cp, 0, "data"), size - 1)
    with pytest.raises(StoreError, match=r"is corrupt: .* crc32c .* load\(step=\.\.\.\)"):
        Checkpoint(cp.uri, local_dir=tmp_path / "flipped").load_sync()
    store.put_bytes(_object(cp, 0, "data"), data + b"!")
    with pytest.raises(StoreError, match=f"records {size} bytes .* holds {size + 1}"):
        Checkpoint(cp.uri, local_dir=tmp_path / "longer").load_sync()


def test_a_read_failing_halfway_raises_and_returns_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shoal._storage.checkpoints import hashing

    cp = Checkpoint((tmp_path / "store").as_uri(), local_dir=tmp_path / "local")
    data = os.urandom(3 * CHUNK)
    cp.save_sync(data)
    real = os.preadv

    def failing(fd: int, buffers: Any, offset: int, *flags: int) -> int:
        if offset >= CHUNK:
            raise OSError(5, "Input/output error")
        return real(fd, buffers, offset, *flags)

    monkeypatch.setattr(hashing.os, "preadv", failing)
    with pytest.raises(OSError, match="Input/output error"):
        cp.load_sync()
    monkeypatch.setattr(hashing.os, "preadv", real)
    assert cp.load_sync() == data


def test_a_file_that_changes_size_while_read_is_read_again_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A piece comes back short (the file shrank under the read): the load reads the file
    whole as it is then, and returns it only if it matches its commit."""
    from shoal._storage.checkpoints import hashing

    cp = Checkpoint((tmp_path / "store").as_uri(), local_dir=tmp_path / "local")
    data = os.urandom(2 * CHUNK + 9)
    cp.save_sync(data)
    real = os.preadv
    shorted: list[int] = []

    def short_once(fd: int, buffers: Any, offset: int, *flags: int) -> int:
        if offset >= 2 * CHUNK and not shorted:
            shorted.append(offset)
            return 0  # as if the file ended here
        return real(fd, buffers, offset, *flags)

    monkeypatch.setattr(hashing.os, "preadv", short_once)
    assert cp.load_sync() == data and shorted


def test_a_bad_ranged_get_setting_is_a_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal import _contract as contract
    from shoal._storage.objstore import ObjectStore
    from shoal.errors import SpecError

    for good, expected in (("off", None), (" 64 ", 64 * MiB), ("", 16 * MiB)):
        monkeypatch.setenv(contract.RANGED_GET_MIN_MIB, good)
        assert ObjectStore("s3://bucket").ranged_get_min == expected
    for bad in ("0", "-3", "16MiB", "none"):
        monkeypatch.setenv(contract.RANGED_GET_MIN_MIB, bad)
        with pytest.raises(SpecError, match="SHOAL_RANGED_GET_MIN_MIB") as err:
            ObjectStore("s3://bucket")
        assert repr(bad) in str(err.value) and "'off'" in str(err.value)


@pytest.mark.parametrize("cache", ["in the page cache", "on disk"])
@pytest.mark.parametrize("commit", ["crc32c", "sha256"])
def test_file_loads_read_in_pieces_verify_every_commit_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str, commit: str,
    no_copies: list[int],
) -> None:
    """Both ways of reading a file into the result (pieces in parallel from the page cache, in
    order from the disk), for CRC32C commits and both sha256 kinds, flip caught."""
    from shoal._storage.checkpoints import hashing

    seen: list[bool] = []
    real = hashing._cached

    def cached(fd: int, first: memoryview) -> bool:
        seen.append(cache == "in the page cache" and real(fd, first))
        return seen[-1]

    monkeypatch.setattr(hashing, "_cached", cached)
    cp = Checkpoint((tmp_path / "store").as_uri(), local_dir=tmp_path / "local")
    big, small = os.urandom(3 * CHUNK + 11), os.urandom(CHUNK - 5)
    cp.save_sync(big)
    cp.save_sync(small)
    if commit == "sha256":
        for step, data in ((0, big), (1, small)):
            store, uri, doc = _commit(cp, step)
            _as_sha256(doc, {"data": data})
            store.put_bytes(uri, json.dumps(doc).encode())
    for step, data in ((0, big), (1, small)):
        assert Checkpoint(cp.uri, local_dir=tmp_path / f"l{step}").load_sync(step=step) == data
    assert no_copies == [] and seen == [cache == "in the page cache"]  # one probe: big's
    _flip(store_for(cp.uri), _object(cp, 0, "data"), 2 * CHUNK + 1)
    algorithm = "crc32c" if commit == "crc32c" else "sha256-pieces"
    with pytest.raises(StoreError, match=f"is corrupt: .* {algorithm}"):
        Checkpoint(cp.uri, local_dir=tmp_path / "flipped").load_sync(step=0)


@pytest.mark.s3
@pytest.mark.parametrize("ranged", [True, False])
def test_an_s3_download_failing_halfway_raises_and_returns_nothing(
    s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranged: bool
) -> None:
    from shoal._storage import objstore

    cp = Checkpoint(_uri(s3_root), local_dir=tmp_path / "local")
    data = os.urandom(3 * CHUNK)
    cp.save_sync(data)
    store = store_for(cp.uri)
    if not ranged:
        monkeypatch.setattr(store, "ranged_get_min", None)
    real = objstore._stream_into
    calls: list[int] = []

    def cut(answer: Any, dest: memoryview, *args: Any) -> int:
        calls.append(len(dest))
        if len(calls) == 1:
            dest[: len(dest) // 2] = b"\0" * (len(dest) // 2)
            raise OSError(104, "Connection reset by peer")  # as the local side of a GET
        return real(answer, dest, *args)

    monkeypatch.setattr(objstore, "_stream_into", cut)
    with pytest.raises(StoreError, match="Connection reset by peer"):
        Checkpoint(cp.uri, local_dir=tmp_path / "fresh").load_sync()
    assert Checkpoint(cp.uri, local_dir=tmp_path / "again").load_sync() == data


def test_a_crc_reader_checksums_only_reads_that_cover_the_file_in_order(tmp_path: Path) -> None:
    from shoal._storage.checkpoints.hashing import CrcReader

    data = os.urandom(3 * MiB + 7)
    (tmp_path / "f").write_bytes(data)
    whole = (len(data), f"{checksums.crc32c(data):08x}")
    with open(tmp_path / "f", "rb") as f:
        reader = CrcReader(f)  # in order, with a re-read (a retried part) in the middle
        reader.read(MiB)
        reader.seek(10)
        reader.read(MiB)
        while reader.read(MiB):
            pass
        assert reader.result(len(data)) == whole
        assert reader.result(len(data) + 1) is None  # not what the caller expected
        f.seek(0)
        skipping = CrcReader(f)
        skipping.read(MiB)
        skipping.seek(2 * MiB)  # a MiB not read yet
        while skipping.read(MiB):
            pass
        assert skipping.result(len(data)) is None
        skipping.seek(MiB)  # read at last: the CRC runs on through the bytes read again
        while skipping.read(MiB):
            pass
        assert skipping.result(len(data)) == whole


@pytest.mark.s3
def test_an_s3_file_save_checksums_the_uploads_own_reads(
    s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No second read of the file: the CRC comes from the bytes the upload read and sent."""
    from shoal._storage.checkpoints import files

    def no_second_pass(fd: int, size: int) -> tuple[int, str]:
        raise AssertionError("the file was read again to checksum it")

    monkeypatch.setattr(files, "_hash_whole", no_second_pass)
    cp = Checkpoint(_uri(s3_root), local_dir=tmp_path / "local")
    # A multipart upload (three parts), a single PUT, and an empty file.
    payloads = [os.urandom(2 * CHUNK + 5), b"small weights", b""]
    for step, data in enumerate(payloads):
        (cp.path / "m.pt").write_bytes(data)
        cp.save_sync(cp.path / "m.pt")
        _, _, doc = _commit(cp, step)
        (entry,) = doc["shards"][0]["objects"]
        assert entry["crc32c"] == f"{checksums.crc32c(data):08x}"
        loaded = Checkpoint(cp.uri, local_dir=tmp_path / f"fresh-{step}").load_sync()
        assert isinstance(loaded, Path) and loaded.read_bytes() == data


@pytest.mark.s3
def test_an_s3_file_save_whose_reads_the_reader_missed_checksums_the_file_itself(
    s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that does not read the file once, in order, through the reader: the CRC comes
    from a pass of its own, still right."""
    from shoal._storage.objstore import ObjectStore

    real = ObjectStore._put_fileobj

    def past_the_reader(self: ObjectStore, f: Any, key: str) -> None:
        real(self, f._f, key)  # the upload reads the file under the reader, not through it

    monkeypatch.setattr(ObjectStore, "_put_fileobj", past_the_reader)
    cp = Checkpoint(_uri(s3_root), local_dir=tmp_path / "local")
    data = os.urandom(CHUNK + 3)
    (cp.path / "m.pt").write_bytes(data)
    cp.save_sync(cp.path / "m.pt")
    _, _, doc = _commit(cp, 0)
    (entry,) = doc["shards"][0]["objects"]
    assert entry["crc32c"] == f"{checksums.crc32c(data):08x}"
