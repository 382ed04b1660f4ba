"""Checkpoint checksums: CRC32C in new commits, sha256 commits of older Shoal still loading, and
corruption caught on every read path (file://, and s3:// through parallel ranged GETs)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from shoal._storage import checksums
from shoal._storage.checkpoint_hashing import CHUNK
from shoal._storage.checkpoints import Checkpoint
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


def test_a_commit_records_each_objects_crc32c(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    big = os.urandom(2 * CHUNK + 5)  # three pieces, checksummed apart and combined
    cp.save_sync(big)
    (cp.path / "w.bin").write_bytes(b"weights")
    cp.save_sync(cp.path / "w.bin")
    for step, expected in ((0, big), (1, b"weights")):
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


def test_a_crc_reader_checksums_only_reads_that_cover_the_file_in_order(tmp_path: Path) -> None:
    from shoal._storage.checkpoint_hashing import CrcReader

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
    from shoal._storage import checkpoint_files

    def no_second_pass(fd: int, size: int) -> tuple[int, str]:
        raise AssertionError("the file was read again to checksum it")

    monkeypatch.setattr(checkpoint_files, "_hash_whole", no_second_pass)
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
