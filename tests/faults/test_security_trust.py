"""A checkpoint's store is not trusted with code: loading a torch state dict unpickles only what
DCP's metadata and a state dict's plain values hold, whoever wrote the store.

A store writer can replace any object and rewrite the commit's checksums to match (CRC32C
catches corruption, not forgery), so each attack here is tried both ways: an object replaced
after the commit (the checksums refuse it before anything is unpickled), and an object replaced
with the commit rewritten to match (the restricted unpickling refuses it). Every malicious
pickle would create a marker file; the marker must never appear. DCP runs in one process
without a process group, as in tests/store/test_checkpoint_state_dict.py, whose helpers these
tests use; tests/process/test_durable.py loads through the same code with gloo ranks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from shoal._storage.checkpoints import Checkpoint
from shoal._storage.checkpoints.checksums import crc32c
from shoal._storage.checkpoints.loads import VersionReader
from shoal._storage.store import join, store_for
from shoal.errors import SpecError, StoreError
from tests.store import conftest as store_fixtures
from tests.store.test_checkpoint_state_dict import _flip, _state

torch = pytest.importorskip("torch")

store_root = store_fixtures.store_root  # the fixture: a file:// and an s3:// store

pytestmark = [pytest.mark.faults,
              pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")]


class Boom:
    """Unpickled, it creates ``marker``: what an attacker's pickle would do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


@dataclasses.dataclass
class Config:
    """A value a state dict may hold that is not weights: a dataclass of the user's."""

    lr: float


def _target() -> dict[str, object]:
    return {"w": torch.zeros(3 * 1024 * 1024), "b": torch.zeros(7), "n": 0}


def _saved(store_root: str, tmp_path: Path, state: dict[str, object] | None = None) -> Checkpoint:
    cp = Checkpoint(join(store_root, "ck"), local_dir=tmp_path / "writer")
    cp.save_state_dict(_state() if state is None else state).result()
    return cp


def _object(cp: Checkpoint, suffix: str) -> str:
    (uri,) = [u for u in store_for(cp.uri).list(cp.uri) if u.endswith(suffix)]
    return uri


def _replace(cp: Checkpoint, uri: str, data: bytes, *, forge_commit: bool) -> None:
    """Put ``data`` at ``uri``; with ``forge_commit``, rewrite step 0's commit to match it, as
    anyone who can write the store can."""
    store = store_for(cp.uri)
    store.put_bytes(uri, data)
    if not forge_commit:
        return
    commit_uri = join(cp.uri, "v000000000000.commit.json")
    doc = json.loads(store.get_bytes(commit_uri))
    for shard in doc["shards"]:
        for entry in shard["objects"]:
            if uri.endswith("/" + entry["key"]):
                entry["size"], entry["crc32c"] = len(data), f"{crc32c(data):08x}"
    store.put_bytes(commit_uri, json.dumps(doc).encode())


def _evil_metadata(marker: Path) -> bytes:
    return pickle.dumps(Boom(marker))


def _load(cp: Checkpoint, tmp_path: Path, target: dict[str, object] | None = None,
          **kw: Any) -> int | None:
    return Checkpoint(cp.uri, local_dir=tmp_path / "reader").load_state_dict(
        _target() if target is None else target, **kw)


# --- finding 4: the metadata -------------------------------------------------------------------


def test_a_forged_metadata_pickle_is_refused_not_run(store_root: str, tmp_path: Path) -> None:
    """Finding 4: DCP's FileSystemReader unpickled ``.metadata`` with plain pickle.load."""
    cp = _saved(store_root, tmp_path)
    marker = tmp_path / "pwned"
    _replace(cp, _object(cp, "/.metadata"), _evil_metadata(marker), forge_commit=True)
    target = _target()
    with pytest.raises(StoreError, match=r"\.metadata names builtins\.exec.*refuses to unpickle"
                                         r".*weights_only=False"):
        _load(cp, tmp_path, target)
    assert not marker.exists()
    assert not target["w"].any()  # type: ignore[attr-defined]


def test_a_replaced_metadata_object_is_refused_by_its_commit_before_unpickling(
        store_root: str, tmp_path: Path) -> None:
    cp = _saved(store_root, tmp_path)
    marker = tmp_path / "pwned"
    _replace(cp, _object(cp, "/.metadata"), _evil_metadata(marker), forge_commit=False)
    with pytest.raises(StoreError, match=r"\.metadata is corrupt: its commit records"):
        _load(cp, tmp_path)
    assert not marker.exists()


def test_a_metadata_object_swapped_after_its_version_was_found_is_caught_as_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store writer racing the load: ``.metadata`` is replaced after the version's files were
    found where they lie and before DCP reads it. The bytes unpickled are the bytes checked."""
    cp = _saved((tmp_path / "store").as_uri(), tmp_path)
    marker = tmp_path / "pwned"
    victim = _object(cp, "/.metadata")
    real = VersionReader.shards_in_store

    def then_swap(*args: Any, **kw: Any) -> Any:
        found = real(*args, **kw)
        store_for(cp.uri).put_bytes(victim, _evil_metadata(marker))
        return found

    monkeypatch.setattr(VersionReader, "shards_in_store", then_swap)
    with pytest.raises(StoreError, match=r"\.metadata is corrupt"):
        _load(cp, tmp_path)
    assert not marker.exists()


# --- finding 4: values that are not tensors ---------------------------------------------------


def _with_evil_value(cp: Checkpoint, fqn: str, payload: object) -> tuple[str, bytes, bytes]:
    """What a store writer makes of step 0: ``payload`` torch.save'd at the end of the data
    file, and metadata (DCP's own classes only) pointing ``fqn`` at it."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    store = store_for(cp.uri)
    meta_uri, data_uri = _object(cp, "/.metadata"), _object(cp, ".distcp")
    metadata = pickle.loads(store.get_bytes(meta_uri))  # the test's own, trusted, load
    data = store.get_bytes(data_uri)
    blob = io.BytesIO()
    torch.save(payload, blob)
    (index,) = [i for i in metadata.storage_data if i.fqn == fqn]
    metadata.storage_data[index] = _StorageInfo(
        metadata.storage_data[index].relative_path, len(data), len(blob.getvalue()))
    return data_uri, data + blob.getvalue(), pickle.dumps(metadata)


def test_a_forged_non_tensor_value_is_loaded_weights_only(store_root: str,
                                                          tmp_path: Path) -> None:
    """Finding 4: DCP's DefaultLoadPlanner loaded non-tensor values with
    ``torch.load(weights_only=False)``."""
    cp = _saved(store_root, tmp_path)
    marker = tmp_path / "pwned"
    data_uri, data, metadata = _with_evil_value(cp, "n", Boom(marker))
    _replace(cp, data_uri, data, forge_commit=True)
    _replace(cp, _object(cp, "/.metadata"), metadata, forge_commit=True)
    with pytest.raises(StoreError, match=r"the value 'n' is not one torch loads with "
                                         r"weights_only=True.*weights_only=False"):
        _load(cp, tmp_path)
    assert not marker.exists()


def test_a_forged_tensor_archive_is_refused_not_run(store_root: str, tmp_path: Path) -> None:
    """A tensor's ``torch.save`` archive is unpickled weights-only too: the load reads each
    distinct pickle of the tensors once, and an unknown one goes through
    ``torch.load(weights_only=True)``, whatever pickles the other tensors had."""
    cp = _saved(store_root, tmp_path)
    marker = tmp_path / "pwned"
    data_uri, data, metadata = _with_evil_value(cp, "w", Boom(marker))
    _replace(cp, data_uri, data, forge_commit=True)
    _replace(cp, _object(cp, "/.metadata"), metadata, forge_commit=True)
    target = _target()
    with pytest.raises(StoreError, match=r"the tensor 'w' is not one torch loads with "
                                         r"weights_only=True.*weights_only=False"):
        _load(cp, tmp_path, target)
    assert not marker.exists()
    # A tensor's archive that unpickles weights-only into something else is refused too.
    cp = Checkpoint(join(store_root, "other"), local_dir=tmp_path / "again" / "writer")
    cp.save_state_dict(_state()).result()
    data_uri, data, metadata = _with_evil_value(cp, "w", {"not": "a tensor"})
    _replace(cp, data_uri, data, forge_commit=True)
    _replace(cp, _object(cp, "/.metadata"), metadata, forge_commit=True)
    with pytest.raises(StoreError, match=r"the archive of the tensor 'w' holds a dict, not a "
                                         r"tensor"):
        _load(cp, tmp_path / "again", target)


def test_a_replaced_data_file_is_refused_by_its_commit_before_unpickling(
        store_root: str, tmp_path: Path) -> None:
    cp = _saved(store_root, tmp_path)
    marker = tmp_path / "pwned"
    data_uri, data, metadata = _with_evil_value(cp, "n", Boom(marker))
    _replace(cp, data_uri, data, forge_commit=False)
    _replace(cp, _object(cp, "/.metadata"), metadata, forge_commit=True)  # passes the commit
    with pytest.raises(StoreError, match=r"\.distcp is corrupt: its commit records"):
        _load(cp, tmp_path)
    assert not marker.exists()


def test_a_flipped_bit_is_still_corruption_not_a_refusal(store_root: str, tmp_path: Path) -> None:
    cp = _saved(store_root, tmp_path)
    _flip(store_for(cp.uri), _object(cp, "/.metadata"), lambda n: n // 2, 0x04)
    with pytest.raises(StoreError, match="is corrupt"):
        _load(cp, tmp_path)


# --- what still loads, and the opt-out --------------------------------------------------------


def test_plain_values_load_weights_only(store_root: str, tmp_path: Path) -> None:
    state = {**_state(), "meta": {"epoch": 3, "name": "run", "lrs": [0.1, 0.01], "done": None,
                                  "flags": (True, False)}, "rng": torch.get_rng_state()}
    cp = _saved(store_root, tmp_path, state)
    target: dict[str, object] = {**_target(), "meta": {"epoch": 0, "name": "", "lrs": [],
                                                       "done": 1, "flags": ()},
                                 "rng": torch.zeros_like(state["rng"])}  # type: ignore[arg-type]
    assert _load(cp, tmp_path, target) == 0
    assert target["n"] == 3 and target["meta"] == state["meta"]
    assert torch.equal(target["rng"], state["rng"])  # type: ignore[arg-type]


def test_a_value_that_is_not_weights_needs_the_opt_out(store_root: str, tmp_path: Path) -> None:
    cp = _saved(store_root, tmp_path, {**_state(), "cfg": Config(lr=0.5)})
    with pytest.raises(StoreError, match=r"the value 'cfg' is not one torch loads with "
                                         r"weights_only=True"):
        _load(cp, tmp_path, {**_target(), "cfg": None})
    target: dict[str, object] = {**_target(), "cfg": None}
    assert _load(cp, tmp_path, target, weights_only=False) == 0
    assert target["cfg"] == Config(lr=0.5)


def test_the_opt_out_is_a_bool(tmp_path: Path) -> None:
    cp = Checkpoint((tmp_path / "store").as_uri(), local_dir=tmp_path / "local")
    with pytest.raises(SpecError, match="weights_only"):
        cp.load_state_dict({}, weights_only="no")  # type: ignore[arg-type]
