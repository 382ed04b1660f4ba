"""Task inputs and outputs as JSON-able literals, driven by type hints (see ``compiler.py``).

This ``__init__`` is the package's only door: code outside ``_storage/codecs/`` imports the
names in ``__all__`` from ``shoal._storage.codecs`` (or ``from shoal._storage import codecs``
and then ``codecs.encode``), never one of its modules (tests/unit/test_layers.py). Its modules:

- ``compiler.py``: a type hint compiled once into a tree of codecs; ``check_type``,
  ``encode``, ``decode``, ``encode_inputs``, ``decode_inputs``, ``literal_hash``;
- ``base.py``: the ``Codec`` base, ``BlobIO``, payload nodes, the error helpers;
- ``scalars.py``, ``compound.py`` (containers, dataclasses, unions), ``namedtuples.py``,
  ``typeddicts.py``, ``json_dict.py`` (untyped dicts), ``pydantic_models.py``,
  ``tensors.py`` (numpy, torch), ``dataframes.py`` (pandas, pyarrow, ``shoal.io.DataFrame``).

The rule for what loads with the package: this file and every module it imports stay light
(``import shoal`` reaches them through the task decorator). numpy, torch, safetensors,
pandas, pyarrow and pydantic are never imported at module level: a codec imports its library
inside the call that converts a value, and recognises a type by its module and name. So no
module needs a lazy door here; ``dataframes`` is exported as a module because
``shoal.io.DataFrame`` reads and writes parquet through it directly.
"""

from __future__ import annotations

from shoal._storage.codecs import dataframes
from shoal._storage.codecs.base import INLINE_LIMIT, BlobIO, canonical_json
from shoal._storage.codecs.compiler import (
    NO_HINT,
    check_type,
    decode,
    decode_inputs,
    encode,
    encode_inputs,
    literal_hash,
)

__all__ = [
    "INLINE_LIMIT",
    "NO_HINT",
    "BlobIO",
    "canonical_json",
    "check_type",
    "dataframes",
    "decode",
    "decode_inputs",
    "encode",
    "encode_inputs",
    "literal_hash",
]
