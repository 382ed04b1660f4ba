"""Durable checkpoints: `Checkpoint` (``shoal.ctx().checkpoint``) and the versions it keeps.

This ``__init__`` is the package's only door: code outside ``_storage/checkpoints/`` imports
the names in ``__all__`` from ``shoal._storage.checkpoints`` and never one of its modules
(tests/unit/test_layers.py). Its modules:

- ``checkpoint.py``: `Checkpoint`, saves, loads and retention;
- ``loads.py``: `VersionReader`, a committed version found and read back, verified;
- ``layout.py``: the store layout of versions, the commit format, what may be removed;
- ``files.py`` (writes: copies that checksum what they write, staging, uploads) and
  ``reads.py`` (loads verified against their commit), over ``hashing.py`` (checksums of
  pieces in a pool of threads) and ``checksums.py`` (CRC32C, combinable);
- ``loaded_bytes.py``: the ``bytes`` a load returns, filled in place;
- ``writer.py``: the background writer of asynchronous saves, below training's priority;
- ``state_dicts.py`` + ``trust.py`` + ``tensor_blobs.py``: torch state dicts through DCP, what
  their loads may unpickle, and their tensors read with one ``torch.load`` per distinct
  pickle. These three import torch.

The rule for what loads with the package: this file imports only modules that import no
heavy library (``import shoal`` loads it, and must stay light). A module that imports torch
is never imported here, nor exposed through a module ``__getattr__``: the function that needs
it imports it when it is called (``Checkpoint.save_state_dict`` → ``state_dicts``), so mypy
and grep see every door, and a heavy import happens only where a heavy call was made.
"""

from __future__ import annotations

from shoal._storage.checkpoints.checkpoint import Checkpoint
from shoal._storage.checkpoints.layout import Version, Versions

__all__ = ["Checkpoint", "Version", "Versions"]
