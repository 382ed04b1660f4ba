"""Durable checkpoints against real stores: file:// in tmp and the loopback S3 server (moto).

Tests taking ``store_root`` run on both backends. Crashes are real: a child process SIGKILLs
itself halfway through a write; a full disk is a real 2 MiB tmpfs mounted in a user+mount
namespace (``unshare``; skipped where the kernel forbids unprivileged user namespaces). Slow
writes and background failures are made by patching ``hashing.digest_chunk``, the
one call every chunk of every write and upload goes through.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shoal._storage.checkpoints import Checkpoint, hashing
from shoal._storage.store import TMP_PREFIX, join, store_for
from shoal.errors import NotFoundError, SpecError, StoreError

MiB = 1024 * 1024


def _uri(root: str, action: str = "a0") -> str:
    return join(root, "checkpoints", "run-1", action)


def _objects(uri: str) -> list[str]:
    """Keys under a checkpoint's URI, relative to it."""
    return [u[len(uri) + 1 :] for u in store_for(uri).list(uri)]


def _local_files(folder: Path) -> list[str]:
    """Every file under ``folder``, temporary ones included (listings skip those)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _run_child(
    code: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- round trips, steps, keep ----------------------------------------------------------------


def test_bytes_round_trip_and_empty_checkpoint(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    assert cp.load_sync() is None and cp.steps() == [] and cp.latest() is None
    assert cp.save_sync(b"\x00weights\xff") == 0
    assert cp.save_sync(bytearray(b"second")) == 1
    assert cp.load_sync() == b"second"
    assert cp.load_sync(step=0) == b"\x00weights\xff"
    assert cp.steps() == [0, 1] and cp.latest() == 1
    # The coroutine twins run the same code in a thread.
    assert asyncio.run(cp.save(memoryview(b"third"))) == 2
    assert asyncio.run(cp.load()) == b"third"
    with pytest.raises(NotFoundError, match=r"no committed step 7; committed steps: \[0, 1, 2\]"):
        cp.load_sync(step=7)


def test_a_commit_records_the_start_that_wrote_it(store_root: str, tmp_path: Path) -> None:
    import json

    from shoal._storage.store import open_store

    uri = _uri(store_root)
    Checkpoint(uri, local_dir=tmp_path / "a", gang_id="2.1").save_sync(b"x", step=4)
    Checkpoint(uri, local_dir=tmp_path / "b", gang_id="3").save_sync(b"y", step=5)
    Checkpoint(uri, local_dir=tmp_path / "c").save_sync(b"z", step=6)
    Checkpoint(uri, local_dir=tmp_path / "d", gang_id="r-1a2b:0.2").save_sync(b"w", step=7)
    store = open_store(store_root)
    written = [json.loads(store.get_bytes(f"{uri}/v{step:012d}.commit.json")).get("written_by")
               for step in (4, 5, 6, 7)]
    assert written == [{"attempt": 2, "restart": 1}, {"attempt": 3}, None,
                       {"run": "r-1a2b", "attempt": 0, "restart": 2}]


def test_file_and_dir_round_trip(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    big = os.urandom(9 * MiB + 123)  # more than one chunk, and more than one S3 part
    (cp.path / "model.pt").write_bytes(big)
    assert cp.save_sync(cp.path / "model.pt") == 0
    tree = cp.path / "state"
    (tree / "optim").mkdir(parents=True)
    (tree / "meta.json").write_text('{"lr": 0.1}')
    (tree / "optim" / "adam.bin").write_bytes(os.urandom(3000))
    (tree / "empty.bin").write_bytes(b"")
    assert cp.save_sync(str(tree)) == 1

    loaded = cp.load_sync(step=0)
    assert isinstance(loaded, Path) and loaded.name == "model.pt"
    assert loaded.read_bytes() == big
    folder = cp.load_sync()
    assert isinstance(folder, Path)
    assert _local_files(folder) == ["empty.bin", "meta.json", "optim/adam.bin"]
    for rel in _local_files(folder):
        assert (folder / rel).read_bytes() == (tree / rel).read_bytes()
    # A second load reuses the verified download.
    assert cp.load_sync() == folder

    commit = json.loads(store_for(cp.uri).get_bytes(join(cp.uri, "v000000000001.commit.json")))
    assert commit["kind"] == "dir" and commit["world_size"] == 1
    assert {o["path"] for o in commit["shards"][0]["objects"]} == set(_local_files(tree))
    assert all(len(o["crc32c"]) == 8 for o in commit["shards"][0]["objects"])


def test_steps_are_validated_and_keep_deletes_the_oldest(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local", keep=2)
    assert cp.save_sync(b"s5", step=5) == 5
    with pytest.raises(SpecError) as err:
        cp.save_sync(b"again", step=5)
    assert err.value.field == "step" and err.value.value == 5
    assert "must be greater than the latest committed step 5" in str(err.value)
    assert "step=6" in str(err.value)
    assert cp.save_sync(b"s6") == 6
    assert cp.save_sync(b"s9", step=9) == 9
    assert cp.save_sync(b"s10") == 10
    assert cp.steps() == [9, 10]
    assert {key.split("/")[0].split(".")[0] for key in _objects(cp.uri)} == {
        "v000000000009",
        "v000000000010",
    }
    with pytest.raises(NotFoundError):
        cp.load_sync(step=5)
    assert cp.load_sync(step=9) == b"s9"


def test_construction_errors_say_what_to_do(tmp_path: Path) -> None:
    uri = _uri(tmp_path.as_uri())
    with pytest.raises(SpecError, match="keep=1 still keeps the last committed version"):
        Checkpoint(uri, local_dir=tmp_path, keep=0)
    with pytest.raises(SpecError, match="keep"):
        Checkpoint(uri, local_dir=tmp_path, keep=True)
    with pytest.raises(SpecError, match=r"rank=3: must be below world_size \(3\)"):
        Checkpoint(uri, local_dir=tmp_path, rank=3, world_size=3)
    cp = Checkpoint(uri, local_dir=tmp_path)
    with pytest.raises(SpecError, match="step=-1: must be an integer >= 0"):
        cp.save_sync(b"x", step=-1)
    with pytest.raises(SpecError, match="data='dict'"):
        cp.save_sync({"w": 1})  # type: ignore[arg-type]
    with pytest.raises(NotFoundError, match="no file or folder"):
        cp.save_sync(tmp_path / "missing.pt")
    assert cp.steps() == []


# --- sharded saves ---------------------------------------------------------------------------


def test_one_rank_commits_its_sharded_save_without_a_manifest(
    store_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """world_size 1 (a state dict saved by one process): nobody to wait for, so no manifest
    is written, listed, read back and deleted; the version is still a sharded one."""
    store = store_for(store_root)
    touched: list[str] = []
    for name in ("put_bytes", "get_bytes", "list", "delete"):
        real = getattr(store, name)

        def spy(uri: Any, *args: Any, real: Any = real) -> Any:
            touched.append(str(uri))
            return real(uri, *args)

        monkeypatch.setattr(store, name, spy)
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    (cp.path / "dcp").mkdir()
    (cp.path / "dcp" / "__0_0.distcp").write_bytes(b"rank zero")
    assert cp.save_shard_sync(cp.path / "dcp", step=3) is True
    assert cp.save_shard_sync(b"next", step=4) is True
    assert not [u for u in touched if ".shards" in u]
    assert cp.steps() == [3, 4]
    shard = cp.load_shard_sync(step=3)
    assert isinstance(shard, Path) and (shard / "__0_0.distcp").read_bytes() == b"rank zero"
    assert cp.load_shard_sync() == b"next"
    with pytest.raises(SpecError, match="sharded"):
        cp.load_sync()
    # A second writer of a step already committed fails, as a whole save's would.
    late = Checkpoint(cp.uri, local_dir=tmp_path / "late")
    with pytest.raises(SpecError, match="greater than the latest committed step 4"):
        late.save_shard_sync(b"late", step=4)


def test_three_ranks_commit_one_sharded_version(store_root: str, tmp_path: Path) -> None:
    uri = _uri(store_root)
    ranks = [
        Checkpoint(uri, local_dir=tmp_path / f"node{r}", rank=r, world_size=3) for r in range(3)
    ]
    (ranks[1].path / "shard.bin").write_bytes(b"rank one")
    (ranks[2].path / "dcp").mkdir()
    (ranks[2].path / "dcp" / "__2_0.distcp").write_bytes(b"rank two")
    payloads: list[Any] = [b"rank zero", ranks[1].path / "shard.bin", ranks[2].path / "dcp"]

    # Two ranks land; nothing is committed until the third does.
    assert ranks[0].save_shard_sync(payloads[0], step=0) is False
    assert ranks[0].steps() == []
    results: list[bool] = []
    barrier = threading.Barrier(2)

    def land(r: int) -> None:
        barrier.wait()
        results.append(ranks[r].save_shard_sync(payloads[r], step=0))

    threads = [threading.Thread(target=land, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, True]  # exactly one call committed it
    assert ranks[2].steps() == [0]

    assert ranks[0].load_shard_sync() == b"rank zero"
    shard1 = ranks[1].load_shard_sync()
    assert isinstance(shard1, Path) and shard1.read_bytes() == b"rank one"
    shard2 = ranks[0].load_shard_sync(rank=2)
    assert isinstance(shard2, Path) and (shard2 / "__2_0.distcp").read_bytes() == b"rank two"
    everything = ranks[0].load_all_shards_sync()
    assert everything is not None
    assert _local_files(everything) == [
        "shard-0/data",
        "shard-1/shard.bin",
        "shard-2/__2_0.distcp",
    ]
    with pytest.raises(SpecError, match="sharded checkpoint"):
        ranks[0].load_sync()
    # Manifests are gone once committed: the commit, payload objects and the seals remain.
    keys = _objects(uri)
    assert all(
        k == "v000000000000.commit.json" or k.count("/") == 2 or k.endswith(".seal") for k in keys
    ), keys
    with pytest.raises(SpecError, match="latest committed step 0"):
        ranks[1].save_shard_sync(b"late", step=0)


def test_a_ranks_download_never_shows_in_another_ranks_folder_of_shards(
    store_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks of one node share ``local_dir``: while one downloads its shard, another lists
    every shard's folder (what DeepSpeedCheckpoint.restore does). The listing holds complete
    ``shard-<rank>`` folders only (CI once saw a rank read another's ``.shoal-tmp-*`` there as
    a shard), and a download whose process died is dropped once stale."""
    from shoal._storage.checkpoints import loads, reads

    uri = _uri(store_root)
    node = tmp_path / "node"
    ranks = [Checkpoint(uri, local_dir=node, rank=r, world_size=2) for r in range(2)]
    for r, cp in enumerate(ranks):
        (cp.path / "part.bin").write_bytes(b"rank %d" % r)
        cp.save_shard_sync(cp.path / "part.bin", step=0)
    seen: list[list[str]] = []
    real_fetch = reads.fetch

    def fetch_and_look(*args: Any, **kwargs: Any) -> Any:
        got = real_fetch(*args, **kwargs)
        for version in (node / "loaded").glob("v*"):
            seen.append(sorted(p.name for p in version.iterdir()))
        return got

    monkeypatch.setattr(reads, "fetch", fetch_and_look)
    assert ranks[1].load_shard_sync() is not None  # its download, seen mid-way
    everything = ranks[0].load_all_shards_sync()
    assert everything is not None
    assert seen and all(name.startswith("shard-") for names in seen for name in names), seen
    assert sorted(p.name for p in everything.iterdir()) == ["shard-0", "shard-1"]

    # A download left by a killed process: kept while fresh, dropped once stale.
    left = node / "loaded" / f"{TMP_PREFIX}killed"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "half.bin").write_bytes(b"half")
    ranks[0].load_all_shards_sync()
    assert left.is_dir()
    old = time.time() - loads.STALE_DOWNLOAD_SECONDS - 60
    for path in (left / "sub" / "half.bin", left / "sub", left):
        os.utime(path, (old, old))
    ranks[0].load_all_shards_sync()
    assert not left.exists()
    assert sorted(p.name for p in (node / "loaded").iterdir()) == [everything.name]


def test_a_resumed_run_never_mixes_shards_with_the_run_it_continues(tmp_path: Path) -> None:
    # A resumed run shares the dead run's checkpoint and starts its gang at attempt 0, restart
    # 0 again: the run in the gang id keeps rank 1's new shard from committing beside the
    # shard rank 0 of the dead run landed (which made rank 0 of the resumed gang, between its
    # load and its latest(), see a step it had not loaded).
    uri = _uri(tmp_path.as_uri())
    dead = Checkpoint(uri, local_dir=tmp_path, rank=0, world_size=2, gang_id="r-dead:0.0")
    assert dead.save_shard_sync(b"dead 0", step=3) is False
    resumed = [Checkpoint(uri, local_dir=tmp_path, rank=r, world_size=2,
                          gang_id="r-resumed:0.0") for r in range(2)]
    assert resumed[1].save_shard_sync(b"new 1", step=3) is False
    assert resumed[0].latest() is None
    assert resumed[0].save_shard_sync(b"new 0", step=3) is True
    assert [resumed[0].load_shard_sync(rank=r) for r in range(2)] == [b"new 0", b"new 1"]


def test_a_restarted_gang_never_mixes_shards_with_a_dead_start(tmp_path: Path) -> None:
    uri = _uri(tmp_path.as_uri())
    dead = [
        Checkpoint(uri, local_dir=tmp_path, rank=r, world_size=3, gang_id="a0.r0") for r in range(2)
    ]
    for r, cp in enumerate(dead):
        assert cp.save_shard_sync(f"dead {r}".encode(), step=4) is False
    fresh = [
        Checkpoint(uri, local_dir=tmp_path, rank=r, world_size=3, gang_id="a0.r1") for r in range(3)
    ]
    # Rank 2 of the new start lands first: two manifests of the dead start must not count.
    assert fresh[2].save_shard_sync(b"new 2", step=4) is False
    assert fresh[0].save_shard_sync(b"new 0", step=4) is False
    assert fresh[1].save_shard_sync(b"new 1", step=4) is True
    assert [fresh[0].load_shard_sync(rank=r) for r in range(3)] == [b"new 0", b"new 1", b"new 2"]
    # The dead start's objects are leftovers of a committed step: removed with its commit.
    under = [k for k in _objects(uri) if k.startswith("v000000000004/")]
    assert len(under) == 6 and all(
        k.split("/")[1].startswith(("r00000", "r00001", "r00002")) for k in under
    )
    commit = json.loads(store_for(uri).get_bytes(join(uri, "v000000000004.commit.json")))
    live = {s["save_id"] for s in commit["shards"]}
    assert {k.split("/")[1].removesuffix(".seal") for k in under} == live
    # A start that dies with shards of step 7 landed leaves them unsealed: the next commit of a
    # later step removes them.
    for cp in dead:
        cp.save_shard_sync(b"never committed", step=7)
    assert any(k.startswith("v000000000007") for k in _objects(uri))
    assert [cp.save_shard_sync(b"nine", step=9) for cp in fresh] == [False, False, True]
    step7 = [k for k in _objects(uri) if k.startswith("v000000000007")]
    assert len(step7) == 2 and all(k.endswith(".seal") for k in step7)  # the claims stay
    assert {store_for(uri).get_bytes(join(uri, k)) for k in step7} == {b"abandoned"}
    assert fresh[0].steps() == [4, 9]


# --- crashes, full disks, corruption ---------------------------------------------------------

_KILL_MIDWAY = """
    import os, signal, sys
    from shoal._storage.checkpoints import hashing
    from shoal._storage.checkpoints import Checkpoint

    cp = Checkpoint(sys.argv[1], local_dir=sys.argv[2])
    cp.save_sync(b"the good one")
    seen = 0
    real = hashing.digest_chunk

    def digest_then_die(h, chunk):
        global seen
        real(h, chunk)
        seen += len(chunk)
        if seen >= 12 * 1024 * 1024:  # half of the payload below has gone through
            os.kill(os.getpid(), signal.SIGKILL)

    hashing.digest_chunk = digest_then_die
    cp.save_sync(os.urandom(24 * 1024 * 1024))
    print("not killed")
"""


def test_a_save_killed_midway_leaves_the_previous_version(
    store_root: str, tmp_path: Path, child_env: dict[str, str]
) -> None:
    uri = _uri(store_root)
    code = _KILL_MIDWAY.replace("sys.argv[1]", repr(uri)).replace(
        "sys.argv[2]", repr(str(tmp_path))
    )
    proc = _run_child(code, child_env)
    assert proc.returncode == -9, proc.stdout + proc.stderr

    cp = Checkpoint(uri, local_dir=tmp_path / "after")
    assert cp.steps() == [0]
    assert cp.load_sync() == b"the good one"
    with pytest.raises(NotFoundError):
        cp.load_sync(step=1)  # the partial is never returned
    local = Path(store_root.removeprefix("file://")) / "checkpoints/run-1/a0"
    if store_root.startswith("file://"):  # file://: the kill really hit mid-write
        assert any(TMP_PREFIX in f for f in _local_files(local / "v000000000001"))

    # The next save takes step 1 and removes what the killed one left.
    assert cp.save_sync(b"next") == 1
    assert cp.load_sync() == b"next"
    commit = json.loads(store_for(uri).get_bytes(join(uri, "v000000000001.commit.json")))
    (shard,) = commit["shards"]
    live = {f"v000000000001/{o['key']}" for o in shard["objects"]}
    live.add(f"v000000000001/{shard['save_id']}.seal")
    assert {k for k in _objects(uri) if k.startswith("v000000000001/")} == live
    if store_root.startswith("file://"):
        assert not any(TMP_PREFIX in f for f in _local_files(local))


_FULL_DISK = """
    import json, os, subprocess, sys
    from pathlib import Path
    from shoal._storage.checkpoints import Checkpoint

    disk, local = Path(sys.argv[1]), sys.argv[2]
    cp = Checkpoint((disk / "store").as_uri() + "/checkpoints/run/a0", local_dir=local)
    first = os.urandom(512 * 1024)
    cp.save_sync(first)
    out = {}
    for name, save in [("sync", cp.save_sync), ("async", lambda d: cp.save_async(d) and cp.wait())]:
        try:
            save(os.urandom(4 * 1024 * 1024))
            out[name] = "saved?!"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"
    out["steps"] = cp.steps()
    out["intact"] = cp.load_sync() == first
    out["files"] = sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if p.is_file())
    out["after"] = cp.save_sync(os.urandom(256 * 1024))
    print(json.dumps(out))
"""


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unprivileged user+mount namespaces")
def test_a_full_disk_fails_clearly_and_keeps_the_previous_version(
    tmp_path: Path, child_env: dict[str, str]
) -> None:
    """A real full disk: a 2 MiB tmpfs, mounted in the child's own user+mount namespace."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(textwrap.dedent(_FULL_DISK))
    proc = subprocess.run(
        [
            "unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
            f'mount -t tmpfs -o size=2m tmpfs "$1" && exec "{sys.executable}" "$2" "$1" "$3"',
            "sh", str(disk), str(script), str(tmp_path / "local"),
        ],
        env=child_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    for name in ("sync", "async"):
        assert out[name].startswith("StoreError: no space left (ENOSPC) on the device holding"), out
        assert (
            "while saving checkpoint step 1; the previous checkpoint (step 0) is intact"
            in (out[name])
        )
    assert out["steps"] == [0] and out["intact"] is True
    # Nothing of the failed saves is left on the full disk: the first payload, seal and commit.
    assert len(out["files"]) == 3 and all("v000000000000" in f for f in out["files"]), out
    assert out["after"] == 1


def test_a_corrupt_object_is_named_and_older_steps_still_load(
    store_root: str, tmp_path: Path
) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    cp.save_sync(b"old and fine")
    (cp.path / "w.bin").write_bytes(os.urandom(2 * MiB))
    cp.save_sync(cp.path / "w.bin")
    store = store_for(cp.uri)
    (victim,) = [u for u in store.list(cp.uri) if u.endswith("/w.bin")]
    data = bytearray(store.get_bytes(victim))
    data[MiB] ^= 0xFF
    local = store.local_path(victim)
    if local is not None:
        local.write_bytes(data)  # flipped in place, as a bad disk would
    else:
        store.put_bytes(victim, bytes(data))
    with pytest.raises(StoreError) as err:
        cp.load_sync()
    assert victim in str(err.value) and "is corrupt" in str(err.value)
    assert "load(step=...)" in str(err.value)
    assert cp.load_sync(step=0) == b"old and fine"


# --- asynchronous saves ----------------------------------------------------------------------


@pytest.fixture
def slow_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 256 KiB chunk of every write takes 20 ms more: a 4 MiB save takes ~0.3 s."""
    real = hashing.digest_chunk
    monkeypatch.setattr(hashing, "CHUNK", 256 * 1024)

    def slow(h: Any, chunk: memoryview) -> None:
        time.sleep(0.02)
        real(h, chunk)

    monkeypatch.setattr(hashing, "digest_chunk", slow)


def test_async_save_returns_once_staged_and_saves_in_order(
    store_root: str, tmp_path: Path, slow_writes: None
) -> None:
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "local")
    buffer = bytearray(os.urandom(4 * MiB))
    expected = bytes(buffer)
    first = cp.save_async(buffer)
    assert not first.done()  # returned before the write finished
    buffer[:10] = b"x" * 10  # the caller owns its buffer again: the save has a copy
    (cp.path / "model.pt").write_bytes(b"second version")
    second = cp.save_async(cp.path / "model.pt")
    assert first.done()  # the second save waited for the first
    (cp.path / "model.pt").unlink()  # the staged hardlink keeps the contents
    cp.wait()
    assert first.result() == 0 and second.result() == 1
    assert cp.load_sync(step=0) == expected
    loaded = cp.load_sync()
    assert isinstance(loaded, Path) and loaded.read_bytes() == b"second version"
    assert list((tmp_path / "local" / "staging").iterdir()) == []  # snapshots removed
    cp.close()


def test_wait_reraises_a_background_failure_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = Checkpoint(_uri(tmp_path.as_uri()), local_dir=tmp_path / "local")
    cp.save_sync(b"fine")

    def broken(h: Any, chunk: memoryview) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(hashing, "digest_chunk", broken)
    future = cp.save_async(b"doomed")
    with pytest.raises(OSError, match="Input/output error"):
        cp.wait()
    assert isinstance(future.exception(), OSError)
    cp.wait()  # raised once
    monkeypatch.undo()
    assert cp.steps() == [0] and cp.load_sync() == b"fine"
    assert cp.save_async(b"better").result() == 1
    cp.close()


def test_rewriting_a_staged_file_in_place_fails_the_save(tmp_path: Path, slow_writes: None) -> None:
    cp = Checkpoint(_uri(tmp_path.as_uri()), local_dir=tmp_path / "local")
    target = cp.path / "model.pt"
    target.write_bytes(os.urandom(2 * MiB))
    cp.save_async(target)
    with open(target, "r+b") as f:  # what torch.save(..., same path) would do: rewrite the inode
        f.truncate(MiB)
    with pytest.raises(StoreError, match="rewritten in place"):
        cp.wait()
    assert cp.steps() == []
    cp.close()  # its writer thread ends with the test


# --- concurrency -------------------------------------------------------------------------------

_RACER = """
    import json, os, sys, time
    from pathlib import Path
    from shoal._storage.checkpoints import Checkpoint
    from shoal.errors import SpecError

    uri, local, me, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    cp = Checkpoint(uri, local_dir=local, keep=3)
    (cp.path / "d").mkdir()
    while not go.exists():
        time.sleep(0.005)
    won = lost = 0
    for k in range(12):
        (cp.path / "d" / "a.bin").write_bytes(os.urandom(64 * 1024))
        (cp.path / "d" / "b.bin").write_bytes(f"{me}:{k}".encode())
        try:
            cp.save_sync(cp.path / "d", step=None if k % 3 == 2 else me + 2 * k)
            won += 1
        except SpecError:  # the other process got there first
            lost += 1
    print(json.dumps({"won": won, "lost": lost}))
"""


def test_two_processes_saving_never_commit_missing_objects(
    store_root: str, tmp_path: Path, child_env: dict[str, str]
) -> None:
    uri = _uri(store_root)
    go = tmp_path / "go"
    script = tmp_path / "racer.py"
    script.write_text(textwrap.dedent(_RACER))
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), uri, str(tmp_path / f"p{i}"), str(i), str(go)],
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert sum(r["won"] for r in results) >= 2

    store = store_for(uri)
    cp = Checkpoint(uri, local_dir=tmp_path / "reader")
    steps = cp.steps()
    assert 1 <= len(steps) <= 3
    for step in steps:  # every commit names objects that exist, with the recorded contents
        commit = json.loads(store.get_bytes(join(uri, f"v{step:012d}.commit.json")))
        for obj in commit["shards"][0]["objects"]:
            assert store.exists(join(uri, f"v{step:012d}", obj["key"]))
        folder = cp.load_sync(step=step)
        assert isinstance(folder, Path) and _local_files(folder) == ["a.bin", "b.bin"]


def test_leftovers_below_a_commit_are_claimed_before_they_are_deleted(tmp_path: Path) -> None:
    """The seal protocol: a dead save's objects go, a save about to commit keeps its own."""
    uri = _uri(tmp_path.as_uri())
    store = store_for(uri)
    cp = Checkpoint(uri, local_dir=tmp_path / "local")
    cp.save_sync(b"zero")
    # A crashed save of step 1 (objects, no seal) and a save of step 2 about to commit (sealed).
    store.put_bytes(join(uri, "v000000000001", "deadbeef0001", "data"), b"half")
    store.put_bytes(join(uri, "v000000000002", "deadbeef0002", "data"), b"whole")
    store.put_bytes(join(uri, "v000000000002", "deadbeef0002.seal"), b"commit")
    cp.save_sync(b"three", step=3)
    keys = _objects(uri)
    assert "v000000000001/deadbeef0001/data" not in keys
    # A zombie writer of step 1 now finds its seal taken and can never commit.
    assert store.put_if_absent(join(uri, "v000000000001", "deadbeef0001.seal"), b"commit") is False
    assert "v000000000002/deadbeef0002/data" in keys
    assert cp.steps() == [0, 3]


def test_a_commit_whose_answer_was_lost_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit PUT lands but the store's answer is lost: the save must not delete the
    objects its (now visible) commit names."""
    from shoal._storage.checkpoints.layout import Versions

    real = Versions.commit

    def lands_then_times_out(self: Versions, version: Any) -> bool:
        real(self, version)
        raise StoreError("put: connection reset by peer")

    monkeypatch.setattr(Versions, "commit", lands_then_times_out)
    cp = Checkpoint(_uri(tmp_path.as_uri()), local_dir=tmp_path / "local")
    assert cp.save_sync(b"made it") == 0
    monkeypatch.undo()
    assert Checkpoint(cp.uri, local_dir=tmp_path / "other").load_sync() == b"made it"


def test_a_bytes_load_also_reads_as_flytes_local_path(store_root: str, tmp_path: Path) -> None:
    """Flyte 2's load() returns a local path; code written for it calls read_bytes()."""
    cp = Checkpoint(_uri(store_root), local_dir=tmp_path / "w")
    cp.save_sync(b"7")
    loaded = cp.load_sync()
    assert loaded == b"7" and isinstance(loaded, bytes)
    assert loaded.read_bytes() == b"7" and loaded.read_text() == "7"  # type: ignore[union-attr]
    assert loaded.is_file() and not loaded.is_dir()  # type: ignore[union-attr]
