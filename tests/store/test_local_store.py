"""The store's behaviour, run against every backend, then what only the file:// backend has.

Every test taking the ``store`` fixture runs twice: on a file:// store in tmp and on an s3://
prefix of the loopback moto server (marked ``s3``). The tests after the divider are file://-only:
a writer SIGKILLed mid-write, file modes, percent-encoded roots, ``open_store`` itself.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from shoal import _contract as contract
from shoal._storage.local import LocalStore
from shoal._storage.store import (
    TMP_PREFIX,
    Store,
    get_dir,
    join,
    open_store,
    put_dir,
    split_scheme,
)
from shoal.errors import NotFoundError, ObjectNotFound, SpecError, StoreError
from tests.helpers import wait_until


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the behaviour every backend has -----------------------------------------------------


def test_round_trip_and_overwrite(store: Store, tmp_path: Path) -> None:
    uri = join(store.root, "a", "b.bin")
    store.put_bytes(uri, b"\x00first\xff")
    assert store.get_bytes(uri) == b"\x00first\xff"
    store.put_bytes(uri, b"second")
    assert store.get_bytes(uri) == b"second"
    empty = join(store.root, "empty")
    store.put_bytes(empty, b"")
    assert store.get_bytes(empty) == b""
    store.get_file(empty, tmp_path / "empty")
    assert (tmp_path / "empty").read_bytes() == b""
    assert store.exists(uri) and store.exists(empty)


def test_missing_object_is_object_not_found(store: Store, tmp_path: Path) -> None:
    uri = join(store.root, "nope", "x")
    with pytest.raises(ObjectNotFound, match="nope/x"):
        store.get_bytes(uri)
    dest = tmp_path / "dl" / "x"
    with pytest.raises(ObjectNotFound):
        store.get_file(uri, dest)
    assert not dest.exists()
    assert not store.exists(uri)
    # A "folder" (a prefix of other objects) is not an object either.
    store.put_bytes(join(store.root, "dir", "inner"), b"1")
    with pytest.raises(ObjectNotFound):
        store.get_bytes(join(store.root, "dir"))
    assert not store.exists(join(store.root, "dir"))


def test_list_is_recursive_sorted_and_segment_based(store: Store) -> None:
    names = ["data/ab/2", "data/ab/1", "data/ab/sub/3", "data/abc/4", "other"]
    for name in names:
        store.put_bytes(join(store.root, name), name.encode())
    assert store.list(join(store.root, "data", "ab")) == [
        join(store.root, n) for n in ["data/ab/1", "data/ab/2", "data/ab/sub/3"]
    ]
    assert store.list(join(store.root, "data", "ab") + "/") == store.list(
        join(store.root, "data/ab")
    )
    assert store.list(store.root) == sorted(join(store.root, n) for n in names)
    assert store.list(join(store.root, "missing")) == []


def test_delete(store: Store) -> None:
    uri = join(store.root, "gone")
    store.put_bytes(uri, b"x")
    store.delete(uri)
    assert not store.exists(uri)
    assert store.list(store.root) == []
    store.delete(uri)  # missing is fine


def test_put_if_absent(store: Store) -> None:
    uri = join(store.root, "claim")
    assert store.put_if_absent(uri, b"first") is True
    assert store.put_if_absent(uri, b"second") is False
    assert store.get_bytes(uri) == b"first"


def _race_put_if_absent(store: Store, uri: str, writers: int) -> list[int]:
    """Start ``writers`` threads at once on ``uri``; the ones that report a win."""
    barrier = threading.Barrier(writers)
    won: list[int] = []

    def write(i: int) -> None:
        barrier.wait()
        if store.put_if_absent(uri, f"writer {i};".encode() * 1000):
            won.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_put_if_absent_has_one_winner_among_concurrent_writers(store: Store) -> None:
    for trial in range(5):
        uri = join(store.root, f"race-{trial}")
        won = _race_put_if_absent(store, uri, 8)
        assert len(won) == 1, won
        assert store.get_bytes(uri) == f"writer {won[0]};".encode() * 1000


def test_readers_never_see_a_partial_object(store: Store) -> None:
    uri = join(store.root, "flip")
    size = 2 * 1024 * 1024
    versions = [b"A" * size, b"B" * size]
    store.put_bytes(uri, versions[0])
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            i = 0
            while not stop.is_set():
                i += 1
                store.put_bytes(uri, versions[i % 2])
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(30):
            data = store.get_bytes(uri)
            assert data in versions, f"partial read: {len(data)} bytes, {set(data)}"
    finally:
        stop.set()
        t.join()
    assert not errors, errors


def test_large_file_round_trip(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    block = os.urandom(1024 * 1024)
    with open(src, "wb") as f:
        for i in range(20):
            f.write(bytes([i]) + block[1:])
    uri = join(store.root, "big", "big.bin")
    store.put_file(src, uri)
    dest = tmp_path / "out" / "big.bin"
    store.get_file(uri, dest)
    assert dest.stat().st_size == src.stat().st_size
    assert _sha(dest.read_bytes()) == _sha(src.read_bytes())
    # The download went through a temporary file that is gone now.
    assert [p.name for p in dest.parent.iterdir()] == ["big.bin"]


def test_put_fileobj_uploads_the_whole_file_read_in_order(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(2 * 8 * 1024 * 1024 + 1000))  # on s3://, a multipart upload
    offsets: list[int] = []

    class Spy:  # what the store's reads see, as a checkpoint's checksumming reader would
        def __init__(self, f: Any) -> None:
            self.f = f

        def read(self, size: int = -1) -> bytes:
            offsets.append(self.f.tell())
            return bytes(self.f.read(size))

        def seek(self, offset: int, whence: int = 0) -> int:
            return int(self.f.seek(offset, whence))

        def tell(self) -> int:
            return int(self.f.tell())

    uri = join(store.root, "objs", "big.bin")
    with open(src, "rb") as f:
        store.put_fileobj(Spy(f), uri)  # type: ignore[arg-type]
    assert store.get_bytes(uri) == src.read_bytes()
    assert offsets == sorted(offsets) and offsets[0] == 0  # once, in order


def test_put_file_of_missing_local_file(store: Store, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no local file"):
        store.put_file(tmp_path / "absent", join(store.root, "x"))


def test_put_dir_get_dir_round_trip(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = {"a.txt": b"a", "sub/b.txt": b"bb", "sub/deeper/c.bin": os.urandom(1000)}
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    (src / "empty-folder").mkdir()
    prefix = join(store.root, "tree")
    written = put_dir(store, src, prefix)
    assert written == [join(prefix, rel) for rel in sorted(files)]
    dest = tmp_path / "dest"
    got = get_dir(store, prefix, dest)
    assert got == sorted(dest / rel for rel in files)
    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data


def test_uris_outside_the_root_or_with_dot_segments_are_refused(store: Store) -> None:
    with pytest.raises(SpecError, match="under the store root"):
        store.get_bytes("s3://elsewhere/x" if store.root.startswith("file") else "file:///x")
    with pytest.raises(SpecError, match=r"'\.\.'"):
        store.put_bytes(join(store.root, "a/../../escape"), b"x")
    with pytest.raises(SpecError):
        store.put_bytes(join(store.root, "a", TMP_PREFIX + "x"), b"x")


# --- file:// only --------------------------------------------------------------------------


def _local(tmp_path: Path) -> LocalStore:
    store = open_store((tmp_path / "store").as_uri())
    assert isinstance(store, LocalStore)
    return store


@pytest.mark.parametrize("previous", [b"old", None])
def test_writer_killed_mid_write_leaves_previous_object(
    tmp_path: Path, child_env: dict[str, str], previous: bytes | None
) -> None:
    store = _local(tmp_path)
    uri = join(store.root, "obj")
    if previous is not None:
        store.put_bytes(uri, previous)
    # The child uploads from a pipe, so it is provably mid-write (8 MiB written to its temp
    # file, waiting for more) when it is killed.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import sys; from shoal._storage.store import open_store; "
        "open_store(sys.argv[1]).put_file(sys.argv[2], sys.argv[3])"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, store.root, str(fifo), uri], env=child_env
    )
    try:
        with open(fifo, "wb") as w:
            w.write(b"x" * (9 * 1024 * 1024))
            w.flush()
            wait_until("the child to write 8 MiB", lambda: any(
                p.stat().st_size >= 8 << 20 for p in store.path.glob(TMP_PREFIX + "*")),
                timeout=20, every=0.01)
            child.send_signal(signal.SIGKILL)
            child.wait()
    except BrokenPipeError:
        pass  # closing our end after the reader died
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    if previous is None:
        assert not store.exists(uri)
        assert store.list(store.root) == []
    else:
        assert store.get_bytes(uri) == previous
        assert store.list(store.root) == [uri]
    # The half-written temporary file is still there, and invisible.
    assert list(store.path.glob(TMP_PREFIX + "*"))


def test_objects_follow_the_umask_and_leave_no_temp_files(tmp_path: Path) -> None:
    store = _local(tmp_path)
    uri = join(store.root, "x", "y")
    store.put_bytes(uri, b"1")
    assert store.put_if_absent(join(store.root, "x", "z"), b"2")
    assert not store.put_if_absent(join(store.root, "x", "z"), b"3")
    old = os.umask(0)
    os.umask(old)
    path = store.local_path(uri)
    assert path is not None and path.read_bytes() == b"1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~old
    assert sorted(p.name for p in path.parent.iterdir()) == ["y", "z"]


def test_local_path(tmp_path: Path) -> None:
    store = _local(tmp_path)
    assert store.local_path(join(store.root, "a/b")) == tmp_path / "store" / "a" / "b"


def test_percent_encoded_root(tmp_path: Path) -> None:
    folder = tmp_path / "with space"
    store = open_store(folder.as_uri())
    assert "%20" in store.root
    store.put_bytes(join(store.root, "k"), b"v")
    assert (folder / "k").read_bytes() == b"v"


def test_store_error_wraps_os_errors(tmp_path: Path) -> None:
    store = _local(tmp_path)
    store.put_bytes(join(store.root, "file"), b"x")
    # "file" is an object, so it cannot also be a folder.
    with pytest.raises(StoreError, match="put"):
        store.put_bytes(join(store.root, "file", "child"), b"y")


def test_open_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = (tmp_path / "s").as_uri()
    assert open_store(root) is open_store(root + "/")
    monkeypatch.setenv(contract.STORE, root)
    assert open_store() is open_store(root)
    with pytest.raises(SpecError) as err:
        open_store("ftp://host/x")
    assert err.value.field == "store" and "file://, s3:// or gs://" in err.value.rule
    with pytest.raises(SpecError, match="bucket"):
        open_store("s3://")
    with pytest.raises(SpecError):
        open_store("/no/scheme")


def test_join_and_split_scheme() -> None:
    assert join("s3://b/p/", "/x/", "y") == "s3://b/p/x/y"
    assert join("s3://b") == "s3://b"
    assert join("file:///", "a") == "file:///a"
    assert join("file:///home/u/", "a", "", "b") == "file:///home/u/a/b"
    assert split_scheme("gs://b/k") == ("gs", "b/k")
    assert split_scheme("file:///a") == ("file", "/a")
