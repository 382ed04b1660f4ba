"""The background writer of asynchronous saves stands back from training, and still lands.

Priorities are read the way `top` reads them, from ``/proc/self/task/<tid>/stat``, on the real
threads of real saves into a file:// store. Whether a thread may raise its priority back
depends on the machine (CAP_SYS_NICE, RLIMIT_NICE): each test probes it and checks the
behaviour that machine must show. Linux only (other systems have no per-thread nice value).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal import _contract as contract
from shoal._storage.checkpoints import Checkpoint, hashing
from shoal._storage.checkpoints.writer import Writer, WriterSettings, deprioritized
from shoal.errors import SpecError
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread nice values are Linux's")

MiB = 1024 * 1024


def _nice_of_thread(tid: int) -> int:
    """The nice value of one thread of this process, as /proc shows it (field 19 of stat)."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def _own_nice() -> int:
    return _nice_of_thread(threading.get_native_id())


def _lowered(base: int) -> int:
    """The nice value of a writer thread standing back from training (the default setting)."""
    return min(19, base + contract.DEFAULT_CHECKPOINT_WRITER_NICE)


def _can_raise_priority() -> bool:
    """Whether a thread here may take back a priority it gave up (root or CAP_SYS_NICE)."""
    answer: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        base = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, base + 1))
        try:
            os.setpriority(os.PRIO_PROCESS, tid, base)
            answer.append(True)
        except PermissionError:
            answer.append(False)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return answer[0]


@pytest.fixture
def chunks_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """(thread name, its nice value) of every piece hashed, in order; 256 KiB pieces."""
    seen: list[tuple[str, int]] = []
    real = hashing.digest_chunk
    monkeypatch.setattr(hashing, "CHUNK", 256 * 1024)

    def spy(h: Any, chunk: memoryview) -> None:
        seen.append((threading.current_thread().name, _own_nice()))
        real(h, chunk)

    monkeypatch.setattr(hashing, "digest_chunk", spy)
    yield seen


def _landed(future: Any, timeout: float = 30.0) -> None:
    """Wait for a save without waiting on it (waiting would hurry it)."""
    wait_until("the asynchronous save to finish", future.done, timeout=timeout, every=0.005)


def test_the_writer_thread_runs_lowered_until_someone_waits() -> None:
    base = _own_nice()
    writer = Writer("shoal-test-writer", WriterSettings())
    inside, release = threading.Event(), threading.Event()
    flags: list[bool] = []

    def job() -> int:
        flags.append(deprioritized())
        inside.set()
        release.wait(10)
        flags.append(deprioritized())
        return 7

    future = writer.submit(job)
    assert inside.wait(10)
    assert writer.thread_id is not None
    assert _nice_of_thread(writer.thread_id) == _lowered(base)
    writer.hurry()
    restored = _can_raise_priority()
    assert _nice_of_thread(writer.thread_id) == (base if restored else _lowered(base))
    release.set()
    assert future.result(timeout=10) == 7
    assert flags == [True, not restored]
    assert not deprioritized()  # the caller's own thread was never touched
    writer.shutdown()


def test_an_async_save_hashes_on_its_lowered_thread_and_verifies(
    tmp_path: Path, chunks_seen: list[tuple[str, int]]
) -> None:
    base = _own_nice()
    cp = Checkpoint(tmp_path.joinpath("store").as_uri(), local_dir=tmp_path / "local")
    data = os.urandom(4 * MiB)
    future = cp.save_async(data)
    _landed(future)
    assert future.result() == 0
    assert len(chunks_seen) == 16
    assert set(chunks_seen) == {("shoal-checkpoint_0", _lowered(base))}

    chunks_seen.clear()
    cp.save_sync(data)  # a sync save still hashes in the pool, at normal priority
    assert {name.split("_")[0] for name, _ in chunks_seen} == {"shoal-hash"}
    assert {nice for _, nice in chunks_seen} == {base}
    assert cp.load_sync(step=0) == data and cp.load_sync(step=1) == data
    cp.close()


def test_a_save_waited_for_or_past_its_deadline_goes_at_full_speed(
    tmp_path: Path, chunks_seen: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, low = _own_nice(), _lowered(_own_nice())
    full = base if _can_raise_priority() else low
    real = hashing.digest_chunk

    def slow(h: Any, chunk: memoryview) -> None:  # ~0.5 s for a 4 MiB save
        time.sleep(0.03)
        real(h, chunk)

    monkeypatch.setattr(hashing, "digest_chunk", slow)
    data = os.urandom(4 * MiB)
    cp = Checkpoint(tmp_path.joinpath("store").as_uri(), local_dir=tmp_path / "local")
    cp.save_async(data)
    wait_until("three chunks hashed", lambda: len(chunks_seen) >= 3, every=0.005)
    cp.wait()  # hurries the save in flight
    assert chunks_seen[0][1] == low and chunks_seen[-1][1] == full
    cp.close()

    chunks_seen.clear()
    monkeypatch.setenv(contract.CHECKPOINT_WRITER_DEADLINE, "0.2")
    cp = Checkpoint(tmp_path.joinpath("store").as_uri(), local_dir=tmp_path / "local")
    _landed(cp.save_async(data))  # nobody waits: only the deadline speeds it up
    assert chunks_seen[0][1] == low and chunks_seen[-1][1] == full
    assert cp.load_sync() == data
    cp.close()


def test_a_lowered_save_lands_while_every_core_is_busy(tmp_path: Path) -> None:
    """Training on every core at normal priority (here: sha256 loops, which release the GIL)
    slows the writer down but never stops it."""
    stop = threading.Event()
    buffer = os.urandom(4 * MiB)

    def train() -> None:
        while not stop.is_set():
            hashlib.sha256(buffer).digest()

    busy = [threading.Thread(target=train) for _ in range(os.cpu_count() or 2)]
    for t in busy:
        t.start()
    try:
        cp = Checkpoint(tmp_path.joinpath("store").as_uri(), local_dir=tmp_path / "local")
        data = os.urandom(16 * MiB)
        future = cp.save_async(data)
        _landed(future, timeout=30)
    finally:
        stop.set()
        for t in busy:
            t.join()
    assert future.result() == 0 and cp.load_sync() == data
    cp.close()


def test_nice_zero_writes_as_before_and_bad_settings_are_spec_errors(
    tmp_path: Path, chunks_seen: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _own_nice()
    monkeypatch.setenv(contract.CHECKPOINT_WRITER_NICE, "0")
    cp = Checkpoint(tmp_path.joinpath("a").as_uri(), local_dir=tmp_path / "la")
    _landed(cp.save_async(os.urandom(2 * MiB)))
    assert {name.split("_")[0] for name, _ in chunks_seen} == {"shoal-hash"}
    assert {nice for _, nice in chunks_seen} == {base}
    cp.close()

    for name, value in ((contract.CHECKPOINT_WRITER_NICE, "20"),
                        (contract.CHECKPOINT_WRITER_NICE, "low"),
                        (contract.CHECKPOINT_WRITER_DEADLINE, "0")):
        monkeypatch.delenv(contract.CHECKPOINT_WRITER_NICE, raising=False)
        monkeypatch.delenv(contract.CHECKPOINT_WRITER_DEADLINE, raising=False)
        monkeypatch.setenv(name, value)
        cp = Checkpoint(tmp_path.joinpath("b").as_uri(), local_dir=tmp_path / "lb")
        (cp.path / "model.pt").write_bytes(b"weights")
        with pytest.raises(SpecError, match=name):
            cp.save_async(cp.path / "model.pt")
        with pytest.raises(SpecError, match=name):
            cp.save_shard_async(cp.path / "model.pt", step=5)
        assert not list((tmp_path / "lb" / "staging").glob("*"))  # nothing left staged
        cp.save_sync(b"x")  # sync saves never read it
        cp.close()


@pytest.mark.filterwarnings("ignore::UserWarning")  # DCP's note on saving with no process group
def test_an_async_state_dict_save_is_written_lowered_and_surfaces_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    from shoal._storage.checkpoints import state_dicts

    base = _own_nice()
    seen: list[int] = []
    real_write = state_dicts._write

    def spy(*args: Any) -> int:
        seen.append(_own_nice())
        return real_write(*args)

    monkeypatch.setattr(state_dicts, "_write", spy)
    cp = Checkpoint(tmp_path.joinpath("store").as_uri(), local_dir=tmp_path / "local")
    state = {"w": torch.randn(512, 512), "b": torch.arange(10)}
    future = cp.save_state_dict(state, async_save=True)
    _landed(future)
    assert future.result() == 0 and seen == [_lowered(base)]
    back = {"w": torch.zeros(512, 512), "b": torch.zeros(10, dtype=torch.long)}
    assert cp.load_state_dict(back) == 0
    assert torch.equal(back["w"], state["w"]) and torch.equal(back["b"], state["b"])

    def broken(h: Any, chunk: memoryview) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(hashing, "digest_chunk", broken)
    cp.save_state_dict(state, async_save=True)
    with pytest.raises(OSError, match="Input/output error"):
        cp.wait()
    monkeypatch.undo()
    assert cp.steps() == [0]
    cp.close()
