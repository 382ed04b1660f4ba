"""Large binary payloads of task inputs/outputs, content-addressed in the object store.

Content addressing makes a value's literal depend only on its bytes, so cache keys stay stable
and a value sent twice is stored once.
"""

from __future__ import annotations

import functools
import hashlib

from shoal._storage.store import Store, join, open_store

PREFIX = "sha256:"


class StoreBlobs:
    """`codecs.BlobIO` over an object store: ``<root>/blobs/<sha256>``.

    References are ``sha256:<hex>``, not URIs, so a value's literal (and any cache key made
    from it) is the same on every store.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def _uri(self, digest: str) -> str:
        return join(self.store.root, "blobs", digest)

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.store.put_if_absent(self._uri(digest), data)
        return PREFIX + digest

    def get(self, ref: str) -> bytes:
        if ref.startswith(PREFIX):
            return self.store.get_bytes(self._uri(ref[len(PREFIX):]))
        return self.store.get_bytes(ref)  # a full URI, from another store


@functools.lru_cache(maxsize=8)
def _blobs_for(root: str) -> StoreBlobs:
    return StoreBlobs(open_store(root))


def store_blobs(root: str | None = None) -> StoreBlobs:
    """The blob store of ``root`` (default: this process's store from the env contract)."""
    from shoal import _contract as contract

    return _blobs_for(root or contract.store_uri())
