"""Codecs for numpy arrays (``.npy`` bytes) and torch tensors (safetensors bytes).

numpy and torch are never imported here at module level: ``import shoal`` must stay light, and
a task that declares ``torch.Tensor`` has already imported torch to write that hint. Types are
recognised by module and name, and the libraries are imported inside the codec calls.

Both formats are pickle-free and deterministic for the same array (the array is made
C-contiguous first, so a transposed view and its copy give the same bytes). Tensors decode on
the CPU, detached; safetensors keeps every torch dtype, bfloat16 and float8 included.
"""

from __future__ import annotations

import importlib.util
import io
from typing import Any, get_origin

from shoal._storage.codecs.base import (
    BlobIO,
    Codec,
    Where,
    bad_literal,
    bad_value,
    get_payload,
    put_payload,
)
from shoal.errors import InputError


def _named(tp: object, module: str, name: str) -> type | None:
    cls = get_origin(tp) or tp
    if isinstance(cls, type) and cls.__module__ == module and cls.__name__ == name:
        return cls
    return None


def ndarray_class(tp: object) -> type | None:
    """``numpy.ndarray`` when the hint is it (or ``numpy.typing.NDArray[...]``), else None."""
    return _named(tp, "numpy", "ndarray")


def tensor_class(tp: object) -> type | None:
    """``torch.Tensor`` when the hint is it, else None."""
    return _named(tp, "torch", "Tensor")


def have_safetensors() -> bool:
    return importlib.util.find_spec("safetensors") is not None


def _literal_parts(literal: Any, at: Where, fmt: str, expected: str) -> Any:
    if not (isinstance(literal, dict) and set(literal) == {"dtype", "shape", fmt}):
        raise bad_literal(at, literal, f'{expected} ({{"dtype", "shape", "{fmt}"}})')
    return literal[fmt]


class ArrayCodec(Codec):
    """A numpy array as ``{"dtype", "shape", "npy": payload}`` (dtype and shape for people;
    the ``.npy`` header is what decoding trusts). Any dtype numpy can save without pickle."""

    name = "numpy.ndarray"

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        import numpy as np

        if not isinstance(value, self.cls):
            fix = "pass tensor.numpy(force=True)" if tensor_class(type(value)) else \
                "pass numpy.asarray(value)"
            raise bad_value(at, value, self.name, fix)
        if isinstance(value, np.ma.MaskedArray):
            raise InputError(field=str(at), value=value,
                             rule="a masked array would lose its mask",
                             fix="pass value.filled(...), or the data and the mask as two arrays")
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise InputError(field=str(at), value=value,
                             rule=f"an array of dtype {arr.dtype} holds Python objects, "
                             "which are only stored by pickling",
                             fix="convert it to a numeric or string dtype, or declare the type "
                             "as list[...] of the items")
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # not ascontiguousarray: it turns 0-d into 1-d
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=False)
        return {"dtype": str(arr.dtype), "shape": list(arr.shape),
                "npy": put_payload(buf.getvalue(), blobs)}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        import numpy as np

        data = get_payload(_literal_parts(literal, at, "npy", self.name), at, blobs)
        try:
            arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        except ValueError as e:
            raise bad_literal(at, literal, self.name, str(e)) from None
        return arr if arr.flags.writeable else arr.copy()

    def claims(self, value: object) -> bool:
        return isinstance(value, self.cls)


class TensorCodec(Codec):
    """A torch tensor as ``{"dtype", "shape", "safetensors": payload}``."""

    name = "torch.Tensor"

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def encode(self, value: object, at: Where, blobs: BlobIO | None) -> Any:
        import torch
        from safetensors.torch import save

        if not isinstance(value, torch.Tensor):
            fix = "pass torch.from_numpy(value)" if ndarray_class(type(value)) else \
                "pass torch.as_tensor(value)"
            raise bad_value(at, value, self.name, fix)
        if value.layout != torch.strided or value.is_meta:
            raise InputError(field=str(at), value=value,
                             rule=f"a {value.layout} tensor on {value.device} has no dense data "
                             "to store",
                             fix="pass value.to_dense() (sparse), or materialize it (meta)")
        t = value.detach().to("cpu").contiguous()
        data = save({"value": t})
        dtype = str(t.dtype).removeprefix("torch.")
        return {"dtype": dtype, "shape": list(t.shape), "safetensors": put_payload(data, blobs)}

    def decode(self, literal: Any, at: Where, blobs: BlobIO | None) -> object:
        from safetensors import SafetensorError
        from safetensors.torch import load

        data = get_payload(_literal_parts(literal, at, "safetensors", self.name), at, blobs)
        try:
            return load(data)["value"]
        except (SafetensorError, KeyError) as e:
            raise bad_literal(at, literal, self.name, str(e)) from None

    def claims(self, value: object) -> bool:
        return isinstance(value, self.cls)
