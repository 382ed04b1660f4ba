"""Flyte 2's task types: pydantic models, str/int enums, pandas/pyarrow frames and
shoal.io.DataFrame, by value through the codecs (literals through JSON, as in SQLite), and
the command line's conversions of them."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pydantic import BaseModel, field_validator

from shoal._storage import codecs
from shoal.cli.args import convert
from shoal.errors import InputError, SpecError, StoreError, UnsupportedTypeError
from shoal.io import DataFrame
from tests.unit.test_codecs import MemBlobs

TASK = "input 'cfg' of task 'env.fn'"


class Split(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Column(BaseModel):
    name: str
    scale: float = 1.0


class Config(BaseModel):
    rows: int
    columns: list[Column]
    tags: dict[str, list[int]] = {}
    split: Split = Split.TRAIN
    level: Level = Level.LOW
    note: str | None = None

    @field_validator("rows")
    @classmethod
    def positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("rows must be positive")
        return v


@dataclasses.dataclass
class Holder:
    cfg: Config
    split: Split


def _rt(value: object, tp: object, blobs: MemBlobs | None = None) -> tuple[Any, object]:
    literal = codecs.encode(value, tp, blobs=blobs, field="x")
    stored = json.loads(json.dumps(literal))
    return stored, codecs.decode(stored, tp, blobs=blobs, field="x")


def _inputs(literal: Any, tp: object) -> object:
    return codecs.decode_inputs({"cfg": literal}, {"cfg": tp}, blobs=None, task="env.fn")["cfg"]


CFG = Config(rows=3, columns=[Column(name="a"), Column(name="b", scale=0.5)],
             tags={"x": [1, 2]}, split=Split.EVAL, level=Level.HIGH)


# -- pydantic -------------------------------------------------------------------------------

def test_pydantic_model_round_trips_by_value() -> None:
    literal, back = _rt(CFG, Config)
    assert literal == {"rows": 3, "columns": [{"name": "a", "scale": 1.0},
                                              {"name": "b", "scale": 0.5}],
                       "tags": {"x": [1, 2]}, "split": "eval", "level": 2, "note": None}
    assert back == CFG and type(back) is Config
    assert type(back.columns[0]) is Column and type(back.split) is Split  # type: ignore[attr-defined]


def test_models_inside_containers_and_dataclasses() -> None:
    _, back = _rt([CFG, CFG], list[Config])
    assert back == [CFG, CFG]
    _, held = _rt(Holder(CFG, Split.TRAIN), Holder)
    assert held == Holder(CFG, Split.TRAIN)
    _, maybe = _rt(None, Config | None)
    assert maybe is None


def test_same_model_same_literal_hash() -> None:
    copy = Config.model_validate(CFG.model_dump())
    assert codecs.literal_hash(codecs.encode(CFG, Config, blobs=None, field="x")) == \
        codecs.literal_hash(codecs.encode(copy, Config, blobs=None, field="x"))


def test_a_stored_model_that_fails_validation_names_the_field() -> None:
    literal = codecs.encode(CFG, Config, blobs=None, field="x")
    bad = {**literal, "columns": [{"name": "a", "scale": "wide"}]}
    with pytest.raises(InputError) as err:
        _inputs(bad, Config)
    assert err.value.field == "input 'cfg.columns[0].scale' of task 'env.fn'"
    assert "Config rejected the stored value" in err.value.rule
    assert "valid number" in err.value.rule
    with pytest.raises(InputError) as err:
        _inputs({**literal, "rows": 0}, Config)
    assert err.value.field == "input 'cfg.rows' of task 'env.fn'"
    assert "rows must be positive" in err.value.rule


def test_not_a_model_is_refused_with_a_fix() -> None:
    with pytest.raises(InputError) as err:
        codecs.encode(["rows", 1], Config, blobs=None, field=TASK)
    assert err.value.rule == "expected Config, got list"


def test_pydantic_is_not_imported_by_the_codecs() -> None:
    code = ("import sys; from shoal._storage import codecs; import shoal.io; "
            "print([m for m in ('pydantic', 'pandas', 'pyarrow') if m in sys.modules])")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# -- enums ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "tp", "literal"), [
    (Split.EVAL, Split, "EVAL"),
    (Level.HIGH, Level, "HIGH"),
    ({Split.TRAIN: Level.LOW}, dict[Split, Level], {"TRAIN": "LOW"}),
])
def test_str_and_int_enums_round_trip(value: object, tp: object, literal: object) -> None:
    stored, back = _rt(value, tp)
    assert stored == literal and back == value


@pytest.mark.skipif(sys.version_info < (3, 11), reason="enum.StrEnum is Python 3.11+")
def test_strenum_round_trips() -> None:
    mode = enum.StrEnum("Mode", {"FAST": "fast", "SLOW": "slow"})  # type: ignore[attr-defined]
    _, back = _rt(mode.FAST, mode)
    assert back is mode.FAST


def test_an_unknown_enum_member_on_decode_names_the_field_and_members() -> None:
    with pytest.raises(InputError) as err:
        _inputs("TEST", Split)
    assert err.value.field == TASK
    assert "Split (members: TRAIN, EVAL)" in err.value.rule


def test_an_enum_value_instead_of_a_member_is_refused_with_the_member() -> None:
    with pytest.raises(InputError) as err:
        codecs.encode("eval", Split, blobs=None, field=TASK)
    assert err.value.fix == "pass Split.EVAL"


# -- data frames ----------------------------------------------------------------------------

FRAME = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [0.5, None, 2.0]})


def test_pandas_frame_round_trips_as_parquet() -> None:
    stored, back = _rt(FRAME, pd.DataFrame)
    assert set(stored) == {"parquet"} and "b64" in stored["parquet"]
    assert isinstance(back, pd.DataFrame)
    pd.testing.assert_frame_equal(back, FRAME)


def test_large_frames_go_to_the_blob_store() -> None:
    blobs = MemBlobs()
    big = pd.DataFrame({"i": range(50_000), "s": [f"row{i}" for i in range(50_000)]})
    stored, back = _rt(big, pd.DataFrame, blobs)
    assert set(stored["parquet"]) == {"blob", "sha256", "size"} and len(blobs.data) == 1
    pd.testing.assert_frame_equal(back, big)  # type: ignore[arg-type]


def test_arrow_table_round_trips() -> None:
    table = pa.table({"a": [1, 2], "b": ["x", "y"]})
    _, back = _rt(table, pa.Table)
    assert isinstance(back, pa.Table) and back.equals(table)


def test_same_frame_same_literal() -> None:
    one = codecs.encode(FRAME, pd.DataFrame, blobs=None, field="x")
    assert one == codecs.encode(FRAME.copy(), pd.DataFrame, blobs=None, field="x")


def test_a_frame_with_unstorable_columns_is_refused() -> None:
    odd = pd.DataFrame({"a": [object(), object()]})
    with pytest.raises(InputError) as err:
        codecs.encode(odd, pd.DataFrame, blobs=None, field=TASK)
    assert "cannot be written as parquet" in err.value.rule


def test_dataframe_reference_uploads_content_addressed() -> None:
    ref = DataFrame.from_df(FRAME)
    assert ref.uri is None and ref.val is FRAME
    stored, back = _rt(ref, DataFrame)
    assert stored["uri"].endswith(f"/data/{stored['hash']}/data.parquet")
    assert stored["format"] == "parquet"
    assert isinstance(back, DataFrame) and back.uri == stored["uri"] and back.val is None
    pd.testing.assert_frame_equal(back.open(pd.DataFrame).all_sync(), FRAME)
    assert back.open(pa.Table).all_sync().num_rows == 3
    # same table, same reference
    assert codecs.encode(DataFrame.from_df(FRAME.copy()), DataFrame, blobs=None,
                         field="x") == stored


def test_dataframe_from_local_and_from_existing_remote(tmp_path: Any) -> None:
    up = DataFrame.from_local_sync(FRAME)
    assert up.uri is not None and up.hash is not None
    again = DataFrame.from_existing_remote(up.uri, format="parquet")
    assert again.hash is None
    pd.testing.assert_frame_equal(again.open(pd.DataFrame).all_sync(), FRAME)
    dest = (tmp_path / "elsewhere.parquet").as_uri()
    there = DataFrame.from_local_sync(FRAME, remote_destination=dest)
    assert there.uri == dest and (tmp_path / "elsewhere.parquet").exists()
    named = (tmp_path / "named.parquet").as_uri()
    stored = codecs.encode(DataFrame.wrap_df(FRAME, uri=named), DataFrame, blobs=None, field="x")
    assert stored["uri"] == named and (tmp_path / "named.parquet").exists()


async def _read_async(ref: DataFrame) -> Any:
    return await ref.open(pd.DataFrame).all()


def test_dataframe_async_forms() -> None:
    import asyncio

    ref = asyncio.run(DataFrame.from_local(FRAME))
    pd.testing.assert_frame_equal(asyncio.run(_read_async(ref)), FRAME)


def test_dataframe_errors() -> None:
    with pytest.raises(SpecError, match="open\\(\\) was not called"):
        DataFrame.from_df(FRAME).all_sync()
    with pytest.raises(SpecError, match=r"pandas\.DataFrame or pyarrow\.Table"):
        DataFrame.from_df(FRAME).open(dict)
    with pytest.raises(SpecError, match=r"pandas\.DataFrame or a pyarrow\.Table"):
        DataFrame.from_df([1, 2])
    with pytest.raises(SpecError, match="no separate column types"):
        DataFrame.from_local_sync(FRAME, columns={"a": int})
    with pytest.raises(SpecError, match="parquet only"):
        DataFrame.from_existing_remote("file:///x.csv", format="csv")
    with pytest.raises(SpecError, match="store URI"):
        DataFrame.from_existing_remote("/tmp/x.parquet")
    with pytest.raises(InputError, match=r"pandas\.DataFrame"):
        codecs.encode([1, 2], pd.DataFrame, blobs=None, field=TASK)
    with pytest.raises(InputError, match=r"shoal\.io\.DataFrame"):
        codecs.encode({"a": 1}, DataFrame, blobs=None, field=TASK)


def test_a_frame_and_a_reference_convert_into_each_other_as_in_flyte() -> None:
    """Flyte passes a flyte.io.DataFrame where a pandas frame is declared (read by the callee)
    and a pandas frame where a flyte.io.DataFrame is (uploaded)."""
    ref = DataFrame.from_local_sync(FRAME)
    stored = codecs.encode(ref, pd.DataFrame, blobs=None, field=TASK)
    assert stored == {"parquet_uri": ref.uri, "hash": ref.hash}  # by reference, not re-read
    back = codecs.decode(stored, pd.DataFrame, blobs=None, field=TASK)
    pd.testing.assert_frame_equal(back, FRAME)
    as_ref = codecs.encode(FRAME, DataFrame, blobs=None, field=TASK)
    assert as_ref == codecs.encode(DataFrame.from_df(FRAME), DataFrame, blobs=None, field=TASK)
    other = DataFrame.from_local_sync(FRAME.head(1), remote_destination=ref.uri)
    assert other.uri == ref.uri  # the file was overwritten: the stored hash catches it
    with pytest.raises(StoreError, match="sha256 mismatch"):
        codecs.decode(stored, pd.DataFrame, blobs=None, field=TASK)


def test_an_overwritten_dataframe_file_is_detected() -> None:
    ref = DataFrame.from_local_sync(FRAME)
    assert ref.uri is not None
    other = DataFrame.from_local_sync(FRAME.head(1), remote_destination=ref.uri)
    assert other.uri == ref.uri
    with pytest.raises(StoreError, match="sha256 mismatch"):
        ref.open(pd.DataFrame).all_sync()


def test_missing_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._storage.codecs import compiler, dataframes

    monkeypatch.setattr(dataframes, "missing_libraries", lambda: ["pyarrow"])
    compiler._cached_codec.cache_clear()  # the codec of pd.DataFrame compiled with pyarrow
    try:
        with pytest.raises(UnsupportedTypeError) as err:
            codecs.check_type(pd.DataFrame, field="parameter 'df' of task 'env.fn'")
    finally:
        compiler._cached_codec.cache_clear()
    assert err.value.fix == "pip install 'shoal[dataframe]'" and "pyarrow" in err.value.rule
    with pytest.raises(SpecError) as spec:
        DataFrame.from_existing_remote("file:///x.parquet").open(pd.DataFrame).all_sync()
    assert spec.value.fix == "pip install 'shoal[dataframe]'"


# -- the command line -----------------------------------------------------------------------

def test_cli_enums_take_names_or_values() -> None:
    assert convert("EVAL", Split, "--split") is Split.EVAL
    assert convert("eval", Split, "--split") is Split.EVAL
    assert convert("2", Level, "--level") is Level.HIGH
    assert convert("HIGH", Level | None, "--level") is Level.HIGH
    with pytest.raises(SpecError) as err:
        convert("evl", Split, "--split")
    assert "names: TRAIN, EVAL; values: train, eval" in err.value.rule
    assert err.value.fix is not None and err.value.fix.startswith("did you mean --split eval?")


def test_cli_models_and_dataclasses_take_json() -> None:
    text = json.dumps({"rows": 2, "columns": [{"name": "a"}], "split": "eval"})
    cfg = convert(text, Config, "--cfg")
    assert cfg == Config(rows=2, columns=[Column(name="a")], split=Split.EVAL)
    held = convert(json.dumps({"cfg": {"rows": 1, "columns": []}, "split": "TRAIN"}), Holder,
                   "--h")
    assert held == Holder(Config(rows=1, columns=[]), Split.TRAIN)


@pytest.mark.parametrize(("text", "tp", "flag", "field", "words"), [
    ('{"rows": 0, "columns": []}', Config, "--cfg", "--cfg, at rows", "rows must be positive"),
    ('{"rows": 1, "columns": [{"nam": "a"}]}', Config, "--cfg", "--cfg, at columns[0].name",
     "Field required"),
    ('{"cfg": {"rows": 1, "columns": []}, "split": "x"}', Holder, "--h", "--h, at split",
     "Split (members: TRAIN, EVAL)"),
    ("[1]", Config, "--cfg", "--cfg", "given as a JSON object"),
    ("{oops", Config, "--cfg", "--cfg", "not a valid Config"),
])
def test_cli_bad_json_is_a_clear_error(text: str, tp: type, flag: str, field: str,
                                       words: str) -> None:
    with pytest.raises(SpecError) as err:
        convert(text, tp, flag)
    assert err.value.field == field
    assert words in err.value.rule
    assert err.value.fix
