"""Kubernetes quantities: the full grammar parses exactly, canonical text matches Kubernetes',
and every bad input names the field, shows the value and says how to fix it."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from shoal._api.quantity import (
    Quantity,
    canonical,
    parse_cpu,
    parse_memory,
    parse_quantity,
    to_bytes,
    to_cores,
    to_millicores,
)
from shoal.errors import SpecError


@pytest.mark.parametrize(
    ("text", "value", "fmt"),
    [
        ("0", Fraction(0), "DecimalSI"),
        ("2", Fraction(2), "DecimalSI"),
        ("+3", Fraction(3), "DecimalSI"),
        ("1.5", Fraction(3, 2), "DecimalSI"),
        (".5", Fraction(1, 2), "DecimalSI"),
        ("5.", Fraction(5), "DecimalSI"),
        ("500m", Fraction(1, 2), "DecimalSI"),
        ("1n", Fraction(1, 10**9), "DecimalSI"),
        ("250u", Fraction(1, 4000), "DecimalSI"),
        ("1k", Fraction(1000), "DecimalSI"),
        ("64G", Fraction(64 * 10**9), "DecimalSI"),
        ("2M", Fraction(2 * 10**6), "DecimalSI"),
        ("1T", Fraction(10**12), "DecimalSI"),
        ("1P", Fraction(10**15), "DecimalSI"),
        ("1E", Fraction(10**18), "DecimalSI"),  # exa, not an exponent
        ("100Ki", Fraction(100 * 1024), "BinarySI"),
        ("4Gi", Fraction(4 * 2**30), "BinarySI"),
        ("1.5Gi", Fraction(3 * 2**29), "BinarySI"),
        ("1Mi", Fraction(2**20), "BinarySI"),
        ("1Ti", Fraction(2**40), "BinarySI"),
        ("1Pi", Fraction(2**50), "BinarySI"),
        ("1Ei", Fraction(2**60), "BinarySI"),
        ("1e3", Fraction(1000), "DecimalExponent"),
        ("1E3", Fraction(1000), "DecimalExponent"),
        ("1.5e-3", Fraction(3, 2000), "DecimalExponent"),
        ("2e+2", Fraction(200), "DecimalExponent"),
    ],
)
def test_grammar_parses_exactly(text: str, value: Fraction, fmt: str) -> None:
    q = parse_quantity(text)
    assert q.value == value
    assert q.format == fmt
    assert isinstance(q.value, Fraction)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", "0"),
        ("2", "2"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        ("500m", "500m"),
        ("1000m", "1"),
        ("1500", "1500"),
        ("2000", "2k"),
        ("64G", "64G"),
        ("64000M", "64G"),
        ("4Gi", "4Gi"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("1.5Ki", "1536"),  # not a whole number of Ki: plain bytes
        ("512", "512"),
        ("0.5Ki", "512"),  # below 1Ki: decimal
        ("1e3", "1e3"),
        ("1500e-3", "1500e-3"),
        ("1.5", "1500m"),
        ("0.0000000001", "1n"),  # below nano precision rounds up, as Kubernetes does
    ],
)
def test_canonical_matches_kubernetes(text: str, expected: str) -> None:
    assert canonical(parse_quantity(text)) == expected
    assert str(parse_quantity(text)) == expected


def test_canonical_round_trips() -> None:
    for text in ["500m", "4Gi", "64G", "1e3", "1536Mi", "3", "7n"]:
        q = parse_quantity(text)
        assert parse_quantity(canonical(q)).value == q.value


def test_cpu_accepts_int_float_and_str() -> None:
    assert parse_cpu(2).value == 2
    assert parse_cpu(0.5).value == Fraction(1, 2)
    assert parse_cpu(0.1).value == Fraction(1, 10)  # the decimal written, not the binary float
    assert parse_cpu("250m").value == Fraction(1, 4)
    assert canonical(parse_cpu(1.5)) == "1500m"
    assert to_cores(parse_cpu("1500m")) == 1.5
    assert to_millicores(parse_cpu("1.5")) == 1500


def test_memory_accepts_int_bytes_and_str() -> None:
    assert to_bytes(parse_memory("4Gi")) == 4 * 2**30
    assert to_bytes(parse_memory("64G")) == 64 * 10**9
    assert to_bytes(parse_memory(1000)) == 1000
    assert canonical(parse_memory(8 * 2**30)) == "8Gi"  # whole KiB ints render in binary
    assert canonical(parse_memory(1000)) == "1k"
    assert canonical(parse_memory(1023)) == "1023"


def test_quantity_passes_through_and_is_frozen() -> None:
    q = parse_memory("4Gi")
    assert parse_memory(q) is q
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.value = Fraction(1)  # type: ignore[misc]
    assert parse_quantity("2") == parse_quantity("2")
    assert hash(parse_quantity("2")) == hash(parse_quantity("2"))
    # Equal amounts are equal however they were written.
    assert parse_quantity("1024") == parse_memory(1024) == parse_quantity("1Ki")
    assert parse_quantity("2") == parse_quantity("2e0") == parse_quantity("2000m")
    assert hash(parse_quantity("1Ki")) == hash(parse_quantity("1024"))


def _err(fn: object, value: object, field: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        fn(value, field=field)  # type: ignore[operator]
    err = info.value
    assert err.field == field
    assert field in str(err)
    assert repr(value) in str(err)
    assert err.fix, "every error carries a fix"
    assert "Fix:" in str(err)
    return err


@pytest.mark.parametrize(
    ("value", "fix_part"),
    [
        ("lots", '"4Gi"'),
        ("", '"4Gi"'),
        ("4GB", "'4G' or '4Gi'"),
        ("4gb", "'4G' or '4Gi'"),
        ("4gi", "'4Gi'"),
        ("4GI", "'4Gi'"),
        ("4GiB", "'4Gi'"),
        ("4 Gi", "'4Gi'"),
        (" 4Gi", "'4Gi'"),
        ("4K", "'4k' or '4Ki'"),
        ("4g", "'4G' or '4Gi'"),
        ("4 bytes", "'4'"),
        ("1e", "'1E' or '1Ei'"),  # a bare e is no exponent: exa was meant
        ("Gi", '"4Gi"'),
        ("1.2.3", '"4Gi"'),
        ("nan", '"4Gi"'),
        ("inf", '"4Gi"'),
    ],
)
def test_bad_memory_strings_suggest_a_fix(value: str, fix_part: str) -> None:
    err = _err(parse_memory, value, "memory")
    assert fix_part in str(err.fix)


def test_negative_values_are_rejected() -> None:
    assert "negative" in _err(parse_memory, "-1Gi", "memory").rule
    assert "negative" in _err(parse_cpu, -2, "cpu").rule
    assert "negative" in _err(parse_cpu, -0.5, "cpu").rule
    assert "negative" in _err(parse_cpu, "-500m", "cpu").rule


def test_non_finite_and_wrong_types_are_rejected() -> None:
    assert "finite" in _err(parse_cpu, float("nan"), "cpu").rule
    assert "finite" in _err(parse_cpu, float("inf"), "cpu").rule
    assert "bool" in _err(parse_cpu, True, "cpu").rule
    assert "list" in _err(parse_cpu, [2], "cpu").rule
    assert "NoneType" in _err(parse_memory, None, "memory").rule


def test_memory_must_be_whole_bytes() -> None:
    err = _err(parse_memory, "500m", "memory")
    assert "whole number of bytes" in err.rule
    assert '"500Mi"' in str(err.fix) and '"500M"' in str(err.fix)
    err = _err(parse_memory, "1.5", "disk")
    assert "2" in str(err.fix)


def test_memory_rejects_floats_with_a_unit_hint() -> None:
    err = _err(parse_memory, 1.5, "memory")
    assert '"1.5Gi"' in str(err.fix)


def test_cpu_is_at_most_millicore_precise() -> None:
    err = _err(parse_cpu, "0.0001", "cpu")
    assert "1m" in err.rule
    assert "'1m'" in str(err.fix)
    err = _err(parse_cpu, 1.0005, "cpu")
    assert "1001m" in str(err.fix)


def test_huge_exponents_are_bounded() -> None:
    err = _err(parse_quantity, "1e999999999", "quantity")
    assert "exponent" in err.rule


def test_quantity_constructor_validates() -> None:
    with pytest.raises(SpecError, match="negative"):
        Quantity(Fraction(-1))
    with pytest.raises(SpecError, match="Fraction"):
        Quantity(1.5)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="format"):
        Quantity(Fraction(1), "Octal")  # type: ignore[arg-type]
