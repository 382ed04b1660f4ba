"""torch state dicts through ``save_state_dict``/``load_state_dict`` in one process (DCP without
a process group), on every store: what a file:// store takes without a copy, and that a
corrupted shard is still caught."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shoal._storage.checkpoints import Checkpoint, files, reads
from shoal._storage.store import join, store_for
from shoal.errors import StoreError

torch = pytest.importorskip("torch")

# DCP's note that it saves from a single process when no process group exists.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _saved(value: object) -> bytes:
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


def _state() -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    return {"w": torch.randn(3 * 1024 * 1024, generator=gen), "b": torch.arange(7.0), "n": 3}


def _blank() -> dict[str, Any]:
    """A target shaped as `_state`, every value zero: what a load fills in."""
    return {"w": torch.zeros(3 * 1024 * 1024), "b": torch.zeros(7), "n": 0}


def _refused_with_a_flipped_shard(cp: Checkpoint, where: Callable[[int], int], bit: int,
                                  local_dir: Path) -> None:
    """Flip ``bit`` at ``where(size)`` of ``cp``'s one shard: a load is refused as corrupt and
    fills in nothing."""
    store = store_for(cp.uri)
    (victim,) = [u for u in store.list(cp.uri) if u.endswith(".distcp")]
    _flip(store, victim, where, bit)
    target = _blank()
    with pytest.raises(StoreError, match=r"is corrupt: .* crc32c"):
        Checkpoint(cp.uri, local_dir=local_dir).load_state_dict(target)
    assert not target["w"].any()  # nothing was loaded from it


def _flip(store: Any, uri: str, where: Callable[[int], int], bit: int) -> None:
    """Flip ``bit`` of the byte at ``where(size)`` of the stored object ``uri``, in place."""
    data = bytearray(store.get_bytes(uri))
    data[where(len(data))] ^= bit
    local = store.local_path(uri)
    if local is not None:
        local.write_bytes(data)
    else:
        store.put_bytes(uri, bytes(data))


def test_a_state_dict_round_trips_and_its_staging_is_moved_not_copied(
    store_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = Checkpoint(join(store_root, "ck"), local_dir=tmp_path / "local")
    state = _state()
    if store_root.startswith("file://"):
        def no_copy(*args: object) -> None:
            raise AssertionError("DCP's files were copied into the store, not moved")

        monkeypatch.setattr(files, "copy_file", no_copy)
    assert cp.save_state_dict(state).result() == 0
    monkeypatch.undo()
    assert list(cp.path.iterdir()) == []  # DCP's staging folder is gone
    target = _blank()
    assert Checkpoint(cp.uri, local_dir=tmp_path / "other").load_state_dict(target) == 0
    assert torch.equal(target["w"], state["w"]) and torch.equal(target["b"], state["b"])
    assert target["n"] == 3
    if store_root.startswith("file://"):
        # Loaded from the store's own files, verified in place: no download cache.
        assert not (tmp_path / "other" / "loaded").exists()


def test_a_corrupt_state_dict_shard_is_caught_on_load(store_root: str, tmp_path: Path) -> None:
    cp = Checkpoint(join(store_root, "ck"), local_dir=tmp_path / "local")
    cp.save_state_dict(_state()).result()
    _refused_with_a_flipped_shard(cp, lambda n: n // 2, 0x10, tmp_path / "other")


def test_a_corrupt_state_dict_metadata_object_is_caught_on_load(
    store_root: str, tmp_path: Path
) -> None:
    """DCP's small ``.metadata`` (fetched whole, not in ranges) is verified too."""
    cp = Checkpoint(join(store_root, "ck"), local_dir=tmp_path / "local")
    cp.save_state_dict(_state()).result()
    store = store_for(cp.uri)
    (victim,) = [u for u in store.list(cp.uri) if u.endswith("/.metadata")]
    _flip(store, victim, lambda n: n - 1, 0x01)
    target = _blank()
    with pytest.raises(StoreError, match=r"\.metadata is corrupt"):
        Checkpoint(cp.uri, local_dir=tmp_path / "other").load_state_dict(target)


def test_a_state_dict_load_lists_the_store_once(
    store_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each listing is a round trip to a remote store: the load finds its version once."""
    cp = Checkpoint(join(store_root, "ck"), local_dir=tmp_path / "local")
    cp.save_state_dict(_state()).result()
    store = store_for(cp.uri)
    listed: list[str] = []
    real = store.list

    def spy(uri: str) -> list[str]:
        listed.append(uri)
        return real(uri)

    monkeypatch.setattr(store, "list", spy)
    target = _blank()
    assert Checkpoint(cp.uri, local_dir=tmp_path / "other").load_state_dict(target) == 0
    assert listed == [cp.uri]
    assert target["n"] == 3


def test_a_state_dict_load_reads_each_file_once_verified_and_a_large_one_from_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file:// store every file DCP opens is read once, into memory, and verified there
    (no second pass to verify it first); a file over ``IN_MEMORY_MAX`` is verified where it
    lies and read from the disk, and a corrupt one is still caught before it is loaded."""
    cp = Checkpoint(join((tmp_path / "store").as_uri(), "ck"), local_dir=tmp_path / "local")
    state = _state()
    cp.save_state_dict(state).result()
    fetched: list[str] = []
    real = reads.fetch

    def spy(store: Any, uri: str, *args: Any) -> Any:
        fetched.append(uri.rsplit("/", 1)[-1])
        return real(store, uri, *args)

    def no_second_pass(*args: Any) -> None:
        raise AssertionError("a file was verified in place, then read again")

    monkeypatch.setattr(reads, "fetch", spy)
    monkeypatch.setattr(reads, "verified_in_place", no_second_pass)
    target = _blank()
    assert Checkpoint(cp.uri, local_dir=tmp_path / "other").load_state_dict(target) == 0
    assert torch.equal(target["w"], state["w"]) and target["n"] == 3
    assert sorted(fetched) == [".metadata", "__0_0.distcp"]
    monkeypatch.undo()

    monkeypatch.setattr(reads, "IN_MEMORY_MAX", 0)
    target = _blank()
    assert Checkpoint(cp.uri, local_dir=tmp_path / "disk").load_state_dict(target) == 0
    assert torch.equal(target["w"], state["w"])
    _refused_with_a_flipped_shard(cp, lambda n: n // 3, 0x04, tmp_path / "again")


def test_a_state_dicts_tensors_load_with_one_torch_load_per_distinct_pickle(
    store_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DCP saves each tensor as its own ``torch.save`` archive, whose pickle holds only the
    layout: the load unpickles each distinct one once (``weights_only=True``) and copies the
    others' bytes with its layout. Every layout lands as torch.load would have it: six of one
    shape, a transposed view (saved non-contiguous), bf16, int64, a 0-d tensor, and a
    non-contiguous target. Values that are not tensors are archives too: once torch.load has
    read one, the others made of numbers, strings and containers of them are unpickled without
    it (a set, which names a global, still goes to torch.load), each as torch.load gives it."""
    gen = torch.Generator().manual_seed(1)
    state: dict[str, Any] = {f"a{i}": torch.randn(64, 32, generator=gen) for i in range(6)}
    state |= {"t": torch.randn(32, 64, generator=gen).t(), "h": torch.randn(9).bfloat16(),
              "i": torch.arange(10), "s": torch.tensor(3.5), "n": 3}
    values = {"lr": 3e-3, "betas": (0.9, 0.95), "amsgrad": False, "fused": None,
              "name": "adamw", "params": [0, 1, 2], "big": 10**20, "kinds": {1, 2}}
    state |= values
    assert not state["t"].is_contiguous()
    cp = Checkpoint(join(store_root, "ck"), local_dir=tmp_path / "local")
    cp.save_state_dict(state).result()
    target = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
              for k, v in state.items()}
    expected = {k: torch.load(io.BytesIO(_saved(v)), weights_only=True)
                for k, v in values.items()}
    target["a5"] = torch.zeros(32, 64).t()  # a target of another layout: copied, not viewed
    loads: list[object] = []
    real = torch.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("weights_only") is True
        loads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    assert Checkpoint(cp.uri, local_dir=tmp_path / "other").load_state_dict(target) == 0
    # One per pickle: (64, 32) float, its transpose, bf16, int64, 0-d; the first value read
    # (the values load in DCP's order) and the set.
    assert len(loads) == 7
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            assert target[key].dtype == value.dtype and torch.equal(target[key], value), key
    assert target["n"] == 3
    for key, value in expected.items():
        assert type(target[key]) is type(value) and target[key] == value, key
