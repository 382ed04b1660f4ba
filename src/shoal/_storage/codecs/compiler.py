"""Task inputs and outputs as JSON-able literals, driven by type hints.

Values cross process boundaries as *literals* (dicts, lists, str, numbers, bool, None) so that
they can be stored in SQLite and hashed into cache keys. A type hint is compiled once into a
tree of codecs (``check_type`` does it when a task is defined, so a bad hint fails there, not
at the first call); ``encode`` and ``decode`` then run that tree. Decoding needs the same hint:
the literal carries values, not a schema.

Literal form, by declared type::

    None, bool, int, str      the JSON value
    float                     a JSON number; NaN and infinities as "nan", "inf", "-inf"
    bytes                     a payload node
    datetime, date, time      ISO 8601 text (time zone kept)
    timedelta                 whole microseconds (int)
    list[T], tuple[...]       a JSON list
    set[T], frozenset[T]      a JSON list, sorted by the canonical JSON of the items
    dict[K, V]                a JSON object; K is str, int (as decimal text), an Enum (by
                              name) or a Literal of str
    dict, dict[str, Any]      a JSON object of JSON values, as Flyte's untyped dict (pickled
                              instead when the task says allow_pickle=True)
    NamedTuple                {"<field>": <literal>, ...}, each field by its own hint
    TypedDict                 {"<key>": <literal>, ...} over the keys present; keys that are
                              not required (total=False, NotRequired) stay absent when absent
    T | None                  null, or T's literal
    Union[A, B, ...]          {"type": "<A's name>", "value": <A's literal>}; None is null
    Literal[...]              the value itself; an Enum member as {"enum": class, "name"}
    Enum                      the member's name (a Flag: its int value); str and int enums too
    dataclass                 {"<field>": <literal>, ...} over its init fields; shoal.File and
                              shoal.Dir are dataclasses like any other; a plain dict passed
                              for one is built into it (omitted fields from their defaults)
    pydantic model            the JSON object of model_dump(mode="json"); a plain dict passed
                              for one is validated into it by the model
    pandas.DataFrame,         {"parquet": payload}
      pyarrow.Table
    shoal.io.DataFrame        {"uri", "format": "parquet", "hash"}: a parquet file in the store
    numpy.ndarray             {"dtype", "shape", "npy": payload}
    torch.Tensor              {"dtype", "shape", "safetensors": payload}
    anything, pickled         {"pickle": payload}, only with allow_pickle=True

A payload node is ``{"b64": "..."}`` up to ``INLINE_LIMIT`` bytes (or when no blob store is
given), else ``{"blob": ref, "sha256": hex, "size": n}`` with the bytes put in ``blobs``.

Refused on purpose: ``pathlib.Path`` (a path on one machine: use shoal.File / shoal.Dir),
``list``/``tuple``/``set`` without item types, abstract ``Sequence``/``Mapping``, ``Any`` and
classes Shoal cannot look into -- the last ones are pickled when the task says
``allow_pickle=True``.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import datetime as dt
import enum
import functools
import hashlib
import inspect
import pathlib
import sys
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from shoal._storage.codecs import dataframes
from shoal._storage.codecs.base import INLINE_LIMIT, BlobIO, Codec, Where, canonical_json
from shoal._storage.codecs.compound import (
    DataclassCodec,
    DictCodec,
    ListCodec,
    OptionalCodec,
    SetCodec,
    TupleCodec,
    UnionCodec,
)
from shoal._storage.codecs.json_dict import JsonDictCodec
from shoal._storage.codecs.namedtuples import NamedTupleCodec, namedtuple_class
from shoal._storage.codecs.pydantic_models import PydanticCodec, model_class
from shoal._storage.codecs.scalars import (
    BoolCodec,
    BytesCodec,
    EnumCodec,
    FloatCodec,
    IntCodec,
    IsoCodec,
    LiteralCodec,
    NoneCodec,
    PickleCodec,
    StrCodec,
    TimedeltaCodec,
    literal_shown,
)
from shoal._storage.codecs.tensors import (
    ArrayCodec,
    TensorCodec,
    have_safetensors,
    ndarray_class,
    tensor_class,
)
from shoal._storage.codecs.typeddicts import TypedDictCodec, field_hints, typeddict_class
from shoal.errors import UnsupportedTypeError

__all__ = [
    "INLINE_LIMIT",
    "BlobIO",
    "canonical_json",
    "check_type",
    "decode",
    "decode_inputs",
    "encode",
    "encode_inputs",
    "literal_hash",
]

# What a parameter without annotation looks like to `inspect`; treated like `Any`.
NO_HINT: Any = inspect.Parameter.empty

_NONE = NoneCodec()
_JSON_DICT = JsonDictCodec()
_STR = StrCodec()
_INT = IntCodec()
_SCALARS: dict[object, Codec] = {
    bool: BoolCodec(),
    int: _INT,
    float: FloatCodec(),
    str: _STR,
    bytes: BytesCodec(),
    dt.datetime: IsoCodec(dt.datetime),
    dt.date: IsoCodec(dt.date),
    dt.time: IsoCodec(dt.time),
    dt.timedelta: TimedeltaCodec(),
}
# Containers written without item types, with an example of the fix.
_BARE: dict[object, str] = {
    list: "list[int]",
    tuple: "tuple[int, ...] or tuple[int, str]",
    set: "set[str]",
    frozenset: "frozenset[str]",
    dict: "dict[str, float]",
}
_BARE_ALIASES: dict[object, object] = {
    typing.List: list,  # noqa: UP006
    typing.Tuple: tuple,  # noqa: UP006
    typing.Set: set,  # noqa: UP006
    typing.FrozenSet: frozenset,  # noqa: UP006
    typing.Dict: dict,  # noqa: UP006
}
# Abstract collection hints, with the concrete type that is stored.
_ABSTRACT: dict[object, str] = {
    abc.Sequence: "list",
    abc.MutableSequence: "list",
    abc.Iterable: "list",
    abc.Collection: "list",
    abc.Mapping: "dict",
    abc.MutableMapping: "dict",
    abc.Set: "set",
    abc.MutableSet: "set",
}
_SUPPORTED = ("None, bool, int, float, str, bytes, list[T], tuple[...], set[T], dict[K, V] "
              "(K: str, int or an Enum), dict of JSON values, T | None, Union, Literal, Enum, "
              "datetime, date, time, timedelta, dataclasses, NamedTuples, TypedDicts and "
              "pydantic models of these (shoal.File and shoal.Dir too), numpy.ndarray, "
              "torch.Tensor, pandas.DataFrame, pyarrow.Table and shoal.io.DataFrame")
_PICKLE_FIX = "pass allow_pickle=True to @env.task to pickle it"


# -- public API -----------------------------------------------------------------------------


def check_type(tp: object, *, field: str, allow_pickle: bool = False) -> None:
    """Raise ``UnsupportedTypeError`` (naming ``field``) unless values of ``tp`` can be encoded."""
    _codec(tp, allow_pickle, field)


def encode(value: object, tp: object, *, blobs: BlobIO | None, field: str,
           allow_pickle: bool = False) -> Any:
    """``value``, declared as ``tp``, as a JSON-able literal; ``InputError`` if it is not a ``tp``.

    Payloads over ``INLINE_LIMIT`` bytes go to ``blobs`` (kept inline when ``blobs`` is None).
    """
    return _codec(tp, allow_pickle, field).encode(value, Where(field), blobs)


def decode(literal: Any, tp: object, *, blobs: BlobIO | None, field: str,
           allow_pickle: bool = False) -> object:
    """The value that ``encode`` turned into ``literal`` with the same ``tp``."""
    return _codec(tp, allow_pickle, field).decode(literal, Where(field), blobs)


def encode_inputs(values: Mapping[str, object], hints: Mapping[str, object], *,
                  blobs: BlobIO | None, task: str, allow_pickle: bool = False) -> dict[str, Any]:
    """Encode a task's bound arguments; a name missing from ``hints`` counts as unannotated."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        codec = _codec(hints.get(name, NO_HINT), allow_pickle,
                       f"parameter {name!r} of task {task!r}")
        out[name] = codec.encode(value, Where(f"input {name!r} of task {task!r}", name), blobs)
    return out


def decode_inputs(literals: Mapping[str, Any], hints: Mapping[str, object], *,
                  blobs: BlobIO | None, task: str, allow_pickle: bool = False) -> dict[str, object]:
    """The inverse of ``encode_inputs``."""
    out: dict[str, object] = {}
    for name, literal in literals.items():
        codec = _codec(hints.get(name, NO_HINT), allow_pickle,
                       f"parameter {name!r} of task {task!r}")
        out[name] = codec.decode(literal, Where(f"input {name!r} of task {task!r}", name), blobs)
    return out


def literal_hash(literal: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``literal``: equal values, equal hashes."""
    return hashlib.sha256(canonical_json(literal).encode("utf-8")).hexdigest()


# -- type hint -> codec ---------------------------------------------------------------------


class _Unsupported(Exception):
    """A hint the compiler cannot handle natively; becomes ``UnsupportedTypeError`` at the top."""

    def __init__(self, tp: object, reason: str, fix: str, *, picklable: bool = True) -> None:
        super().__init__(reason)
        self.tp = tp
        self.reason = reason
        self.fix = fix
        self.picklable = picklable  # False where pickling would hide a bug (unresolved hints)
        self.path: list[str] = []  # dataclass fields from the outermost dataclass down to tp
        self.owner = ""  # that outermost class, with its kind: "dataclass Cfg"


def _type_name(tp: object) -> str:
    if tp is NO_HINT:
        return "it"
    if tp is None or tp is type(None):
        return "None"
    if isinstance(tp, type) and get_origin(tp) is None:
        return tp.__qualname__ if tp.__module__ == "builtins" \
            else f"{tp.__module__}.{tp.__qualname__}"
    return repr(tp).replace("typing.", "")


def _codec(tp: object, allow_pickle: bool, field: str) -> Codec:
    try:
        try:
            hash(tp)
        except TypeError:  # unhashable hint (Annotated with a dict...): fine, just not cached
            return _Compiler(allow_pickle).compile(tp)
        # repr in the key: `int | float == float | int`, but the order picks the branch a
        # value like 3 goes to, and that must not depend on which was compiled first.
        return _cached_codec(tp, repr(tp), allow_pickle)
    except _Unsupported as e:
        where = f" (field {'.'.join(e.path)!r} of {e.owner})" if e.path else ""
        raise UnsupportedTypeError(field=field, value=tp,
                                   rule=f"{_type_name(e.tp)}{where} {e.reason}",
                                   fix=e.fix) from None


@functools.lru_cache(maxsize=1024)
def _cached_codec(tp: object, shown: str, allow_pickle: bool) -> Codec:
    return _Compiler(allow_pickle).compile(tp)


def _unwrap(tp: object) -> object:
    """Strip what does not change how a value is stored: Annotated[...] and NewType."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif hasattr(tp, "__supertype__"):  # typing.NewType
            tp = tp.__supertype__
        else:
            return tp


def _pickle_codec(tp: object) -> PickleCodec:
    cls = get_origin(tp) or tp
    if not isinstance(cls, type) or cls in (object, Any, NO_HINT):  # Any is a class in 3.11
        return PickleCodec(None, "Any")
    return PickleCodec(cls, cls.__qualname__ if cls is tp else _type_name(tp))


def _frame_codec(tp: object) -> Codec | None:
    """The codec of ``pandas.DataFrame``, ``pyarrow.Table`` or ``shoal.io.DataFrame``."""
    kind = dataframes.frame_kind(tp)
    if kind is None and not dataframes.is_reference(tp):
        return None
    missing = dataframes.missing_libraries()
    if missing:
        raise _Unsupported(tp, f"values are stored as parquet, which needs "
                           f"{' and '.join(missing)} (not installed)", dataframes.INSTALL)
    assert isinstance(tp, type)  # frame_kind and is_reference only accept classes
    return dataframes.FrameCodec(tp, kind) if kind else dataframes.ReferenceCodec(tp)


def _bare_example(tp: object) -> str | None:
    """For ``list``, ``typing.Dict`` and the like: an example that names the item types."""
    try:
        cls = _BARE_ALIASES.get(tp, tp)
        example: str | None = _BARE.get(cls)
    except TypeError:  # unhashable hint: not a bare container
        return None
    return example


def _class_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``. On Python 3.10 a dataclass's ``_: KW_ONLY`` marker
    written as text (``from __future__ import annotations``; File and Dir have one) is read as
    ``object``: 3.10's typing refuses the marker as a hint, 3.11's takes it."""
    if sys.version_info < (3, 11) and dataclasses.is_dataclass(cls) and any(
            hint == "KW_ONLY" for base in cls.__mro__
            for hint in vars(base).get("__annotations__", {}).values()):
        return typing.get_type_hints(cls, localns={"KW_ONLY": object})
    return typing.get_type_hints(cls)


class _Compiler:
    """Builds the codec tree of one hint; ``building`` lets a dataclass refer to itself."""

    def __init__(self, allow_pickle: bool) -> None:
        self.allow_pickle = allow_pickle
        self.building: dict[type, DataclassCodec | NamedTupleCodec | TypedDictCodec] = {}

    def compile(self, tp: object) -> Codec:
        try:
            return self._native(_unwrap(tp))
        except _Unsupported as e:
            # Pickling kicks in at the innermost type that needs it: list[Foo] stays a list.
            if self.allow_pickle and e.picklable:
                return _pickle_codec(tp)
            raise

    def _native(self, tp: object) -> Codec:
        if tp is NO_HINT:
            raise _Unsupported(tp, "has no type hint",
                               f"annotate it (e.g. `x: int`), or {_PICKLE_FIX}")
        if isinstance(tp, (str, typing.ForwardRef)):
            raise _Unsupported(tp, "is a string annotation that was never resolved",
                               "resolve hints with typing.get_type_hints() before passing them",
                               picklable=False)
        if tp is None or tp is type(None):
            return _NONE
        if tp is Any or tp is object:
            raise _Unsupported(tp, "gives Shoal no way to check or store the value",
                               f"use a concrete type (int, list[str], a dataclass...), "
                               f"or {_PICKLE_FIX}")
        if isinstance(tp, TypeVar):
            raise _Unsupported(tp, "is a type variable", "use a concrete type")
        origin, args = get_origin(tp), get_args(tp)
        if origin is Literal:
            return self._literal(tp, args)
        if origin is Union or origin is types.UnionType:
            return self._union(tp, args)
        example = _bare_example(tp)
        if example is not None and _BARE_ALIASES.get(tp, tp) is dict and not self.allow_pickle:
            return _JSON_DICT  # Flyte's untyped dict: JSON values, checked where passed
        if example is not None:
            raise _Unsupported(tp, "does not say what it holds",
                               f"give the item types, e.g. {example}")
        if origin is list:
            return ListCodec(self.compile(args[0]))
        if origin is tuple:
            if args in ((), ((),)):  # tuple[()]: 3.11 says (), 3.10 says ((),)
                return TupleCodec(())
            if len(args) == 2 and args[1] is Ellipsis:
                return TupleCodec((), rest=self.compile(args[0]))
            return TupleCodec(tuple(self.compile(a) for a in args))
        if origin in (set, frozenset):
            return SetCodec(self.compile(args[0]), frozen=origin is frozenset)
        if origin is dict:
            if args[0] is str and args[1] is Any and not self.allow_pickle:
                return _JSON_DICT
            return self._dict(tp, args[0], args[1])
        if origin in _ABSTRACT:
            concrete = _ABSTRACT[origin]
            inner = ", ".join(_type_name(a) for a in args) or "str"
            raise _Unsupported(tp, "is an abstract collection type",
                               f"did you mean {concrete}[{inner}]?")
        return self._class(tp, origin)

    def _class(self, tp: object, origin: object) -> Codec:
        frames = _frame_codec(tp)
        if frames is not None:
            return frames
        model = model_class(tp)
        if model is not None:
            return PydanticCodec(model)
        array = ndarray_class(tp)
        if array is not None:
            return ArrayCodec(array)
        tensor = tensor_class(tp)
        if tensor is not None:
            if not have_safetensors():
                raise _Unsupported(tp, "values are stored in the safetensors format, which is "
                                   "not installed", "pip install 'shoal[tensors]'")
            return TensorCodec(tensor)
        if origin is None and isinstance(tp, type):
            if tp in _SCALARS:
                return _SCALARS[tp]
            if issubclass(tp, enum.Enum):
                return EnumCodec(tp)
            if dataclasses.is_dataclass(tp):
                return self._dataclass(tp)
            if namedtuple_class(tp) is not None:
                return self._namedtuple(tp)
            if typeddict_class(tp) is not None:
                return self._typeddict(tp)
            if issubclass(tp, pathlib.PurePath):
                raise _Unsupported(tp, "is a path on one machine; the process or node that "
                                   "reads it may not have that file",
                                   "use shoal.File or shoal.Dir to move the file through the "
                                   "object store, or str if it is only a name")
        raise _Unsupported(tp, f"cannot be passed between tasks; supported types: {_SUPPORTED}",
                           f"use a dataclass of supported types, or {_PICKLE_FIX}")

    def _literal(self, tp: object, args: tuple[object, ...]) -> Codec:
        for v in args:
            if type(v) not in (str, int, bool, type(None)) and not isinstance(v, enum.Enum):
                raise _Unsupported(tp, f"holds {v!r}; Literal values must be str, int, bool, "
                                   "None or Enum members",
                                   "use an Enum class as the type for other values")
        return LiteralCodec(args, f"Literal[{', '.join(map(literal_shown, args))}]")

    def _union(self, tp: object, args: tuple[object, ...]) -> Codec:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return OptionalCodec(self.compile(rest[0]))
        branches = tuple(self.compile(a) for a in rest)
        names = [b.name for b in branches]
        for name in names:
            if names.count(name) > 1:
                raise _Unsupported(tp, f"has two types named {name!r}, so a stored value could "
                                   "not say which one it is",
                                   "rename one of the classes, or wrap each in a dataclass")
        return UnionCodec(branches, nullable=len(rest) < len(args))

    def _dict(self, tp: object, key_tp: object, value_tp: object) -> Codec:
        key_tp = _unwrap(key_tp)
        key: Codec | None = None
        if key_tp is str or key_tp is int:
            key = _STR if key_tp is str else _INT
        elif isinstance(key_tp, type) and issubclass(key_tp, enum.Enum) \
                and not issubclass(key_tp, enum.Flag):
            key = EnumCodec(key_tp)
        elif get_origin(key_tp) is Literal and all(type(v) is str for v in get_args(key_tp)):
            key = self._literal(key_tp, get_args(key_tp))
        if key is None:
            raise _Unsupported(tp, f"has keys of type {_type_name(key_tp)}, but stored "
                               "(JSON) object keys are text",
                               "use str, int or an Enum as the key type, or store pairs as "
                               "list[tuple[K, V]]")
        return DictCodec(key, self.compile(value_tp), int_keys=key is _INT)

    def _fields(self, codec: DataclassCodec | NamedTupleCodec | TypedDictCodec,
                names: list[str] | None) -> None:
        """Fill ``codec.fields`` with the codecs of the class's ``names``, by their hints."""
        cls = codec.cls
        if cls in self.building:
            return
        self.building[cls] = codec
        try:
            try:
                if isinstance(codec, TypedDictCodec):
                    hints, codec.required = field_hints(cls)
                else:
                    hints = _class_hints(cls)
            except (NameError, TypeError) as e:
                raise _Unsupported(cls, f"has field types that cannot be resolved ({e})",
                                   "define or import every type its fields name at module "
                                   "level (not under `if TYPE_CHECKING:`)") from None
            for name in hints if names is None else names:
                if name not in hints:
                    raise _Unsupported(cls, f"has no type hint for field {name!r}",
                                       "declare it with typing.NamedTuple and typed fields "
                                       "(class P(NamedTuple): x: int)")
                try:
                    codec.fields[name] = self.compile(hints[name])
                except _Unsupported as e:
                    e.path.insert(0, name)
                    kind = "NamedTuple" if isinstance(codec, NamedTupleCodec) else \
                        "TypedDict" if isinstance(codec, TypedDictCodec) else "dataclass"
                    e.owner = f"{kind} {cls.__qualname__}"
                    raise
        except _Unsupported:
            del self.building[cls]  # a pickle fallback must not leave a half-built codec
            raise

    def _namedtuple(self, cls: type) -> Codec:
        known = self.building.get(cls)
        if known is not None:
            return known
        codec = NamedTupleCodec(cls)
        self._fields(codec, list(getattr(cls, "_fields", ())))
        return codec

    def _typeddict(self, cls: type) -> Codec:
        known = self.building.get(cls)
        if known is not None:
            return known
        codec = TypedDictCodec(cls)
        self._fields(codec, None)
        return codec

    def _dataclass(self, cls: type) -> Codec:
        known = self.building.get(cls)
        if known is not None:
            return known
        codec = DataclassCodec(cls)
        # Fields set by __init__/__post_init__ itself are not passed to it, so not stored.
        self._fields(codec, [f.name for f in dataclasses.fields(cls) if f.init])
        codec.required = frozenset(
            f.name for f in dataclasses.fields(cls)
            if f.init and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        return codec
