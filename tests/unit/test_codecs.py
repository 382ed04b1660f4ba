"""Type-hint-driven codecs: round trips, determinism, and every rejection with its message.

Literals are sent through ``json.dumps``/``json.loads`` before decoding, as they are when they
go through SQLite, so a literal that only works as a Python object would fail here. Blobs go to
an in-memory ``BlobIO`` (the real one is the object store, tested with the store).
"""

# The tests spell Optional, Union and typing.List on purpose: users write them too.
# ruff: noqa: UP006, UP007, UP045

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import math
import pathlib
import subprocess
import sys
import typing
from collections.abc import Sequence
from typing import Any, Literal, Optional, TypeVar, Union

import numpy as np
import numpy.typing as npt
import pytest
import torch

from shoal._storage import codecs
from shoal._storage.codecs import INLINE_LIMIT
from shoal.errors import InputError, ShoalSystemError, StoreError, UnsupportedTypeError

PARAM = "parameter 'x' of task 'env.fn'"
OUT = "output of task 'env.fn'"


class MemBlobs:
    """In-memory, content-addressed ``BlobIO``."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        ref = "mem://" + hashlib.sha256(data).hexdigest()
        self.data[ref] = data
        return ref

    def get(self, ref: str) -> bytes:
        return self.data[ref]


class Color(enum.Enum):
    RED = 1
    GREEN = "g"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Perm(enum.Flag):
    R = 1
    W = 2
    X = 4


@dataclasses.dataclass
class Opt:
    lr: float
    betas: tuple[float, float] = (0.9, 0.999)


@dataclasses.dataclass
class Cfg:
    name: str
    opt: Opt
    layers: list[int]
    color: Color = Color.RED
    extra: dict[str, float] = dataclasses.field(default_factory=dict)
    note: str | None = None
    derived: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.derived = len(self.layers)


@dataclasses.dataclass
class SubCfg(Cfg):
    more: int = 0


@dataclasses.dataclass(frozen=True)
class FileRef:
    """Shaped like shoal.File: a frozen dataclass holding a store URI."""

    path: str
    name: str | None = None


@dataclasses.dataclass
class Tree:
    value: int
    children: list[Tree] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class Stamped:
    at: dt.datetime
    every: dt.timedelta


@dataclasses.dataclass
class WithPath:
    p: pathlib.Path


@dataclasses.dataclass
class Outer:
    inner: WithPath


@dataclasses.dataclass
class Unresolved:
    x: NotDefinedAnywhere  # type: ignore[name-defined]  # noqa: F821


@dataclasses.dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError("n must be > 0")


class Opaque:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.x == self.x

    __hash__ = None  # type: ignore[assignment]


def roundtrip(value: object, tp: object, *, blobs: MemBlobs | None = None,
              allow_pickle: bool = False) -> tuple[Any, object]:
    literal = codecs.encode(value, tp, blobs=blobs, field=OUT, allow_pickle=allow_pickle)
    stored = json.loads(json.dumps(literal))
    assert stored == literal
    decoded = codecs.decode(stored, tp, blobs=blobs, field=OUT, allow_pickle=allow_pickle)
    return literal, decoded


# -- round trips ----------------------------------------------------------------------------

UTC2 = dt.timezone(dt.timedelta(hours=2))


@pytest.mark.parametrize(
    ("value", "tp"),
    [
        (None, None),
        (None, type(None)),
        (True, bool),
        (False, bool),
        (0, int),
        (-(2**70), int),
        (1.5, float),
        (-0.0, float),
        (1e-310, float),
        ("héllo\n\"world\"", str),
        ("", str),
        (b"\x00\xff" * 10, bytes),
        (b"", bytes),
        (dt.datetime(2024, 5, 6, 7, 8, 9, 123456), dt.datetime),
        (dt.datetime(2024, 5, 6, 7, 8, tzinfo=UTC2), dt.datetime),
        (dt.date(2024, 2, 29), dt.date),
        (dt.time(23, 59, 59, 1), dt.time),
        (dt.timedelta(days=-3, seconds=5, microseconds=7), dt.timedelta),
        ("b", Literal["a", "b"]),
        (1, Literal[1, True, None]),
        (True, Literal[1, True, None]),
        (None, Literal[1, True, None]),
        (Color.GREEN, Color),
        (Level.HIGH, Level),
        (Perm.R | Perm.X, Perm),
        ([1, 2, 3], list[int]),
        ([], list[str]),
        ((1, 2, 3), tuple[int, ...]),
        ((1, "a", 2.5), tuple[int, str, float]),
        ((), tuple[()]),
        ({"b", "a", "c"}, set[str]),
        (frozenset({3, 1}), frozenset[int]),
        ({"x": [1.0, 2.5], "y": []}, dict[str, list[float]]),
        ({1: "a", -20: "b"}, dict[int, str]),
        ({Color.RED: 1, Color.GREEN: 2}, dict[Color, int]),
        ({"a": 1}, dict[Literal["a", "b"], int]),
        ([{"k": (1, 2)}, {}], list[dict[str, tuple[int, int]]]),
        (None, Optional[int]),
        (3, Optional[int]),
        (None, int | None),
        ([[1], None], list[Optional[list[int]]]),
        (3, int | str),
        ("3", int | str),
        ([1], list[int] | list[str]),
        (["a"], list[int] | list[str]),
        (None, Union[int, Opt, None]),
        (Opt(lr=0.1), Union[int, Opt, None]),
        (7, typing.NewType("UserId", int)),
        (7, typing.Annotated[int, "meta"]),
        ([1, 2], typing.List[int]),
    ],
)
def test_round_trip(value: object, tp: object) -> None:
    _, decoded = roundtrip(value, tp)
    assert decoded == value
    assert type(decoded) is type(value)


def test_float_special_values_are_strings() -> None:
    for value, text in [(math.inf, "inf"), (-math.inf, "-inf")]:
        literal, decoded = roundtrip(value, float)
        assert literal == text and decoded == value
    literal, decoded = roundtrip(math.nan, float)
    assert literal == "nan" and isinstance(decoded, float) and math.isnan(decoded)


def test_int_is_accepted_for_float_and_stored_as_float() -> None:
    literal, decoded = roundtrip(3, float)
    assert literal == 3.0 and type(literal) is float and type(decoded) is float
    assert codecs.decode(3, float, blobs=None, field=OUT) == 3.0  # hand-written literals


def test_numpy_scalars_are_accepted_as_python_scalars() -> None:
    assert roundtrip(np.int64(5), int) == (5, 5)
    assert roundtrip(np.float32(0.5), float) == (0.5, 0.5)
    assert roundtrip(np.bool_(True), bool) == (True, True)


def test_str_subclass_and_list_for_tuple_become_the_declared_type() -> None:
    class Name(str):
        pass

    _, decoded = roundtrip(Name("a"), str)
    assert type(decoded) is str
    _, decoded = roundtrip([1, 2], tuple[int, ...])
    assert decoded == (1, 2)


def test_enum_literal_is_the_name_and_flag_the_value() -> None:
    assert roundtrip(Color.GREEN, Color)[0] == "GREEN"
    assert roundtrip(Perm.R | Perm.W, Perm)[0] == 3


def test_union_tags_the_branch() -> None:
    assert roundtrip(3, int | str)[0] == {"type": "int", "value": 3}
    assert roundtrip(None, int | str | None)[0] is None
    # The exact type wins over a branch that would also accept the value...
    assert roundtrip(3, float | int)[0] == {"type": "int", "value": 3}
    assert roundtrip(True, int | bool)[0] == {"type": "bool", "value": True}
    # ...and with no exact match, the first branch that accepts it is used.
    literal, decoded = roundtrip(3, float | str)
    assert literal == {"type": "float", "value": 3.0} and decoded == 3.0
    literal, _ = roundtrip(Opt(lr=1.0), Union[int, Opt])
    assert literal == {"type": "Opt", "value": {"lr": 1.0, "betas": [0.9, 0.999]}}


def test_union_order_is_kept_although_reordered_unions_are_equal() -> None:
    assert (list[float] | list[int]) == (list[int] | list[float])
    assert roundtrip([1], list[float] | list[int])[0]["type"] == "list[float]"
    assert roundtrip([1], list[int] | list[float])[0]["type"] == "list[int]"


def test_set_and_dict_literals_are_deterministic() -> None:
    assert roundtrip({"b", "c", "a"}, set[str])[0] == ["a", "b", "c"]
    assert roundtrip({10: "x", 2: "y"}, dict[int, str])[0] == {"10": "x", "2": "y"}


def test_nested_dataclasses() -> None:
    cfg = Cfg(name="run", opt=Opt(lr=1), layers=[4, 8], extra={"wd": 0.1}, note="n")
    literal, decoded = roundtrip(cfg, Cfg)
    assert decoded == cfg and isinstance(decoded, Cfg)
    assert decoded.derived == 2  # init=False fields are recomputed, not stored
    assert literal == {
        "name": "run",
        "opt": {"lr": 1.0, "betas": [0.9, 0.999]},
        "layers": [4, 8],
        "color": "RED",
        "extra": {"wd": 0.1},
        "note": "n",
    }


def test_dataclass_defaults_fill_fields_missing_from_the_literal() -> None:
    decoded = codecs.decode({"name": "a", "opt": {"lr": 1}, "layers": []}, Cfg, blobs=None,
                            field=OUT)
    assert decoded == Cfg(name="a", opt=Opt(lr=1.0), layers=[])


def test_recursive_frozen_and_kw_only_dataclasses() -> None:
    tree = Tree(1, [Tree(2), Tree(3, [Tree(4)])])
    assert roundtrip(tree, Tree)[1] == tree
    ref = FileRef(path="file:///tmp/store/a.bin")
    assert roundtrip(ref, FileRef) == ({"path": ref.path, "name": None}, ref)
    stamped = Stamped(at=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                      every=dt.timedelta(hours=1))
    assert roundtrip(stamped, Stamped)[1] == stamped


def test_bytes_payload_inline_and_blob() -> None:
    blobs = MemBlobs()
    small = b"x" * INLINE_LIMIT
    literal, decoded = roundtrip(small, bytes, blobs=blobs)
    assert set(literal) == {"b64"} and decoded == small and not blobs.data
    big = b"y" * (INLINE_LIMIT + 1)
    literal, decoded = roundtrip(big, bytes, blobs=blobs)
    assert literal["blob"] in blobs.data and literal["size"] == len(big) and decoded == big
    literal, decoded = roundtrip(big, bytes, blobs=None)  # no store: always inline
    assert set(literal) == {"b64"} and decoded == big


# -- numpy and torch ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "arr",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.linspace(0, 1, 7, dtype=np.float64),
        np.array([-1, 2, -3], dtype=np.int8),
        np.array([[1, 65535]], dtype=np.uint16),
        np.array([True, False]),
        np.array([1 + 2j], dtype=np.complex64),
        np.array([0.5, -2], dtype=np.float16),
        np.array(["ab", "c"]),
        np.array(3.5),  # 0-d
        np.zeros((0, 3), dtype=np.int32),
    ],
    ids=lambda a: f"{a.dtype}-{a.shape}",
)
def test_numpy_round_trip(arr: np.ndarray) -> None:
    literal, decoded = roundtrip(arr, np.ndarray)
    assert isinstance(decoded, np.ndarray)
    assert decoded.dtype == arr.dtype and decoded.shape == arr.shape
    np.testing.assert_array_equal(decoded, arr)
    assert literal["dtype"] == str(arr.dtype) and literal["shape"] == list(arr.shape)
    assert decoded.flags.writeable


def test_numpy_ndarray_typing_alias_and_non_contiguous() -> None:
    base = np.arange(20, dtype=np.int64).reshape(4, 5)
    view = base.T[::2]
    literal, decoded = roundtrip(view, npt.NDArray[np.int64])
    np.testing.assert_array_equal(decoded, view)
    # Same values, same literal, whatever the memory layout.
    assert literal == roundtrip(np.ascontiguousarray(view), np.ndarray)[0]
    assert literal == roundtrip(np.asfortranarray(view), np.ndarray)[0]


def test_big_numpy_array_goes_to_blob() -> None:
    blobs = MemBlobs()
    arr = np.random.default_rng(0).standard_normal((100, 100))
    literal, decoded = roundtrip(arr, np.ndarray, blobs=blobs)
    assert set(literal["npy"]) == {"blob", "sha256", "size"}
    assert list(blobs.data) == [literal["npy"]["blob"]]
    np.testing.assert_array_equal(decoded, arr)


@pytest.mark.parametrize(
    "t",
    [
        torch.arange(6, dtype=torch.float32).reshape(2, 3),
        torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16),
        torch.tensor([0.5], dtype=torch.float16),
        torch.tensor([[1, 2]], dtype=torch.int64),
        torch.tensor([True, False]),
        torch.tensor(7, dtype=torch.uint8),  # 0-d
        torch.arange(12.0).reshape(3, 4).t(),  # non-contiguous
        torch.arange(12.0).reshape(3, 4)[1:, ::2],  # offset, strided view
    ],
    ids=lambda t: f"{t.dtype}-{tuple(t.shape)}-{'c' if t.is_contiguous() else 'nc'}",
)
def test_torch_round_trip(t: torch.Tensor) -> None:
    literal, decoded = roundtrip(t, torch.Tensor)
    assert isinstance(decoded, torch.Tensor)
    assert decoded.dtype == t.dtype and decoded.shape == t.shape
    assert torch.equal(decoded, t)
    assert literal["dtype"] == str(t.dtype).removeprefix("torch.")
    assert literal == roundtrip(t.contiguous().clone(), torch.Tensor)[0]


def test_torch_requires_grad_is_detached_and_big_goes_to_blob() -> None:
    blobs = MemBlobs()
    t = torch.randn(200, 200, requires_grad=True)
    literal, decoded = roundtrip(t, torch.Tensor, blobs=blobs)
    assert isinstance(decoded, torch.Tensor) and not decoded.requires_grad
    assert literal["safetensors"]["blob"] in blobs.data
    assert torch.equal(decoded, t.detach())


# -- literal_hash ---------------------------------------------------------------------------

def test_literal_hash_is_stable_and_content_based() -> None:
    def h(value: object, tp: object) -> str:
        return codecs.literal_hash(codecs.encode(value, tp, blobs=MemBlobs(), field=OUT))

    cfg = Cfg(name="a", opt=Opt(lr=0.1), layers=[1], extra={"a": 1.0, "b": 2.0})
    same = Cfg(name="a", opt=Opt(lr=0.1), layers=[1], extra={"b": 2.0, "a": 1.0})
    assert h(cfg, Cfg) == h(same, Cfg)
    assert h(cfg, Cfg) != h(dataclasses.replace(cfg, layers=[2]), Cfg)
    assert h({"x", "y", "z"}, set[str]) == h({"z", "y", "x"}, set[str])
    assert h(3, float) == h(3.0, float)
    big = np.arange(100_000, dtype=np.float32)
    assert h(big, np.ndarray) == h(big.copy(), np.ndarray)
    assert h(torch.ones(3, 3).t(), torch.Tensor) == h(torch.ones(3, 3), torch.Tensor)
    literal = codecs.encode(cfg, Cfg, blobs=None, field=OUT)
    assert codecs.literal_hash(literal) == codecs.literal_hash(json.loads(json.dumps(literal)))
    expected = hashlib.sha256(b'{"a":[1,2.5],"b":null}').hexdigest()
    assert codecs.literal_hash({"b": None, "a": [1, 2.5]}) == expected


# -- inputs ---------------------------------------------------------------------------------

def test_encode_and_decode_inputs() -> None:
    hints = {"cfg": Cfg, "n": int, "arr": np.ndarray}
    values = {"cfg": Cfg(name="a", opt=Opt(lr=1), layers=[]), "n": 3, "arr": np.ones(2)}
    literals = codecs.encode_inputs(values, hints, blobs=None, task="env.fn")
    assert list(literals) == ["cfg", "n", "arr"] and literals["n"] == 3
    decoded = codecs.decode_inputs(json.loads(json.dumps(literals)), hints, blobs=None,
                                   task="env.fn")
    assert decoded["cfg"] == values["cfg"] and decoded["n"] == 3
    np.testing.assert_array_equal(decoded["arr"], values["arr"])  # type: ignore[arg-type]


def test_input_without_hint_is_unsupported_unless_pickled() -> None:
    with pytest.raises(UnsupportedTypeError) as e:
        codecs.encode_inputs({"x": 1}, {}, blobs=None, task="env.fn")
    assert e.value.field == PARAM and "no type hint" in e.value.rule
    literals = codecs.encode_inputs({"x": Opaque(1)}, {}, blobs=None, task="env.fn",
                                    allow_pickle=True)
    assert codecs.decode_inputs(literals, {}, blobs=None, task="env.fn",
                                allow_pickle=True) == {"x": Opaque(1)}


# -- pickling -------------------------------------------------------------------------------

def test_pickle_only_when_allowed_and_only_where_needed() -> None:
    with pytest.raises(UnsupportedTypeError) as e:
        codecs.check_type(list[Opaque], field=PARAM)
    assert "allow_pickle=True" in (e.value.fix or "")
    codecs.check_type(list[Opaque], field=PARAM, allow_pickle=True)
    blobs = MemBlobs()
    literal, decoded = roundtrip([Opaque(1), Opaque(2)], list[Opaque], allow_pickle=True,
                                 blobs=blobs)
    assert isinstance(literal, list) and set(literal[0]) == {"pickle"}
    assert decoded == [Opaque(1), Opaque(2)]
    assert roundtrip({"a": (1, {2})}, Any, allow_pickle=True)[1] == {"a": (1, {2})}
    big = [Opaque(i) for i in range(20_000)]
    literal, decoded = roundtrip(big, Any, allow_pickle=True, blobs=blobs)
    assert "blob" in literal["pickle"] and decoded == big


def test_pickled_value_must_match_its_class() -> None:
    with pytest.raises(InputError) as e:
        codecs.encode(3, Opaque, blobs=None, field=OUT, allow_pickle=True)
    assert e.value.field == OUT and "expected Opaque, got int" in e.value.rule


def test_unpicklable_value_is_an_input_error() -> None:
    with pytest.raises(InputError) as e:
        codecs.encode(lambda: 1, Any, blobs=None, field=OUT, allow_pickle=True)
    assert "cannot be pickled" in e.value.rule and "module level" in (e.value.fix or "")


# -- unsupported type hints -----------------------------------------------------------------

T = TypeVar("T")


@pytest.mark.parametrize(
    ("tp", "in_rule", "in_fix"),
    [
        (list, "does not say what it holds", "list[int]"),
        (set, "does not say what it holds", "set[str]"),
        (tuple, "does not say what it holds", "tuple[int, ...]"),
        (typing.List, "does not say what it holds", "list[int]"),
        (Any, "no way to check", "allow_pickle=True"),
        (object, "no way to check", "allow_pickle=True"),
        (codecs.NO_HINT, "no type hint", "`x: int`"),
        (pathlib.Path, "path on one machine", "shoal.File or shoal.Dir"),
        (list[pathlib.PurePosixPath], "path on one machine", "shoal.File"),
        (Sequence[int], "abstract collection", "did you mean list[int]?"),
        (typing.Mapping[str, int], "abstract collection", "did you mean dict[str, int]?"),
        (dict[float, int], "keys of type float", "str, int or an Enum"),
        (dict[tuple[int, int], int], "keys of type", "list[tuple[K, V]]"),
        (Literal[1.5], "Literal values must be", "Enum"),
        (T, "type variable", "concrete type"),
        ("int", "string annotation", "get_type_hints"),
        (Opaque, "cannot be passed between tasks; supported types: None, bool", "dataclass"),
        (Optional[Opaque], "cannot be passed between tasks", "allow_pickle=True"),
        (Outer, "(field 'inner.p' of dataclass Outer) is a path", "shoal.File"),
        (Unresolved, "cannot be resolved", "module level"),
        (typing.Callable[[int], int], "cannot be passed", "dataclass"),
    ],
)
def test_unsupported_types(tp: object, in_rule: str, in_fix: str) -> None:
    with pytest.raises(UnsupportedTypeError) as e:
        codecs.check_type(tp, field=PARAM)
    err = e.value
    assert err.field == PARAM and err.value is tp
    assert in_rule in err.rule and in_fix in (err.fix or "")
    assert str(err).startswith(PARAM + "=") and "Fix: " in str(err)


def test_union_branches_with_the_same_name_are_rejected() -> None:
    other = dataclasses.make_dataclass("Opt", [("x", int)])  # same name as the module's Opt

    with pytest.raises(UnsupportedTypeError) as e:
        codecs.check_type(Union[Opt, other], field=PARAM)
    assert "two types named 'Opt'" in e.value.rule and "rename" in (e.value.fix or "")


def test_torch_without_safetensors_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._storage.codecs import compiler, tensors

    monkeypatch.setattr(compiler, "have_safetensors", lambda: False)
    compiler._cached_codec.cache_clear()
    try:
        with pytest.raises(UnsupportedTypeError) as e:
            codecs.check_type(torch.Tensor, field=PARAM)
        assert "shoal[tensors]" in (e.value.fix or "")
    finally:
        compiler._cached_codec.cache_clear()
    assert tensors.have_safetensors()


def test_return_type_field_is_named() -> None:
    field = "return type of task 'env.fn'"
    with pytest.raises(UnsupportedTypeError) as e:
        codecs.check_type(set, field=field)
    assert str(e.value).startswith(field)


# -- values that do not match their type ----------------------------------------------------

@pytest.mark.parametrize(
    ("value", "tp", "in_rule", "in_fix"),
    [
        (True, int, "expected int, got bool", "pass 1"),
        (np.bool_(False), int, "expected int, got numpy.bool", "pass 0"),
        (1, bool, "expected bool, got int", "pass True"),
        (3.0, int, "expected int, got float", "int(3.0)"),
        ("3", int, "expected int, got str", "pass an int"),
        (True, float, "expected float, got bool", "pass a float"),
        (pathlib.Path("/x"), str, "expected str, got pathlib.PosixPath", "str(path)"),
        ("abc", bytes, "expected bytes, got str", "s.encode()"),
        (dt.datetime(2024, 1, 1), dt.date, "expected datetime.date", "value.date()"),
        (5, dt.timedelta, "expected datetime.timedelta", "pass a datetime.timedelta"),
        ("c", Literal["a", "b"], "expected one of 'a', 'b'", "'a', 'b'"),
        (True, Literal[1], "expected one of 1", "pass one of 1"),
        (1, Color, "expected Color, got int", "pass Color.RED"),
        ({1, 2}, list[int], "expected list[int], got set", "sorted(value)"),
        (np.ones(2), list[float], "expected list[float]", "value.tolist()"),
        ((1, 2, 3), tuple[int, int], "2 items, got 3", "tuple[T, ...]"),
        ([1], set[int], "expected set[int], got list", "pass a set[int]"),
        ([("a", 1)], dict[str, int], "expected dict[str, int], got list", "change the type hint"),
        (2.5, int | str, "expected int | str, got float", "one of: int | str"),
        (["lr", 1.0], Opt, "expected Opt, got list", "change the type hint"),
        (SubCfg(name="a", opt=Opt(lr=1), layers=[]), Cfg, "expected Cfg, got", "exactly a Cfg"),
        ([1, 2], np.ndarray, "expected numpy.ndarray, got list", "numpy.asarray(value)"),
        (torch.ones(2), np.ndarray, "expected numpy.ndarray", "tensor.numpy(force=True)"),
        (np.ones(2), torch.Tensor, "expected torch.Tensor", "torch.from_numpy(value)"),
        (np.array([object()]), np.ndarray, "holds Python objects", "numeric or string dtype"),
        (np.ma.masked_array([1, 2], mask=[0, 1]), np.ndarray, "lose its mask", "filled"),
        (torch.ones(2, 2).to_sparse(), torch.Tensor, "has no dense data", "to_dense()"),
    ],
)
def test_wrong_values(value: object, tp: object, in_rule: str, in_fix: str) -> None:
    with pytest.raises(InputError) as e:
        codecs.encode(value, tp, blobs=None, field=OUT)
    err = e.value
    assert err.field == OUT and err.value is value
    assert in_rule in err.rule and in_fix in (err.fix or "")


def test_nested_input_paths_are_named() -> None:
    def field_of(value: object, tp: object) -> str:
        with pytest.raises(InputError) as e:
            codecs.encode_inputs({"cfg": value}, {"cfg": tp}, blobs=None, task="env.fn")
        return e.value.field

    assert field_of(Cfg(name="a", opt=Opt(lr="x"), layers=[]), Cfg) == \
        "input 'cfg.opt.lr' of task 'env.fn'"  # type: ignore[arg-type]
    assert field_of({"k": [1, True]}, dict[str, list[int]]) == \
        "input 'cfg[\"k\"][1]' of task 'env.fn'"
    assert field_of(Tree(1, [Tree(2, [Tree("3")])]), Tree) == \
        "input 'cfg.children[0].children[0].value' of task 'env.fn'"  # type: ignore[arg-type]
    with pytest.raises(InputError) as e:
        codecs.encode(Cfg(name="a", opt=Opt(lr=1), layers=[1, "2"]), Cfg, blobs=None,
                      field=OUT)  # type: ignore[list-item]
    assert e.value.field == "output of task 'env.fn', at layers[1]"
    assert str(e.value).startswith("output of task 'env.fn', at layers[1]='2': expected int")


# -- literals that do not decode ------------------------------------------------------------

@pytest.mark.parametrize(
    ("literal", "tp", "in_rule"),
    [
        ("3", int, "does not decode as int"),
        (True, int, "does not decode as int"),
        (1.5, int, "does not decode as int"),
        (1, bool, "does not decode as bool"),
        ("x", float, "does not decode as float"),
        ({"b64": "!!"}, bytes, "base64"),
        ("BLUE", Color, "members: RED, GREEN"),
        ({"name": "a", "opt": {"lr": 1}, "layrs": []}, Cfg, "did you mean 'layers'?"),
        ({"name": "a", "opt": {"lr": 1}}, Cfg, "missing field 'layers'"),
        ({"type": "bytes", "value": 1}, int | str, '{"type": ..., "value": ...}'),
        ([1, 2, 3], tuple[int, int], "does not decode as tuple[int, int]"),
        ({"1.5": "a"}, dict[int, str], "key '1.5' is not an int"),
        ("2024-13-01", dt.date, "does not decode as datetime.date"),
        ({"npy": {"b64": ""}}, np.ndarray, "does not decode as numpy.ndarray"),
    ],
)
def test_bad_literals(literal: object, tp: object, in_rule: str) -> None:
    with pytest.raises(InputError) as e:
        codecs.decode(literal, tp, blobs=None, field=OUT)
    assert e.value.field == OUT and e.value.value == literal
    assert in_rule in e.value.rule and "signature change" in (e.value.fix or "")


def test_dataclass_validation_on_decode_is_an_input_error() -> None:
    with pytest.raises(InputError) as e:
        codecs.decode({"n": -1}, Positive, blobs=None, field=OUT)
    assert "n must be > 0" in e.value.rule and "__post_init__" in (e.value.fix or "")


def test_blob_payload_needs_a_store_and_intact_bytes() -> None:
    blobs = MemBlobs()
    literal = codecs.encode(b"z" * (INLINE_LIMIT + 1), bytes, blobs=blobs, field=OUT)
    with pytest.raises(ShoalSystemError, match="no blob store"):
        codecs.decode(literal, bytes, blobs=None, field=OUT)
    blobs.data[literal["blob"]] = b"tampered"
    with pytest.raises(StoreError, match="sha256 mismatch"):
        codecs.decode(literal, bytes, blobs=blobs, field=OUT)


# -- lazy imports ---------------------------------------------------------------------------

def test_import_does_not_load_numpy_or_torch() -> None:
    code = (
        "import sys\n"
        "from shoal._storage import codecs\n"
        "codecs.check_type(dict[str, list[int]], field='x')\n"
        "heavy = sorted(m for m in ('numpy', 'torch', 'safetensors') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": str(src)}, check=False)
    assert result.returncode == 0, result.stderr
