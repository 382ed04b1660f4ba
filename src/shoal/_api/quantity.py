"""Kubernetes resource quantities ("500m", "2", "4Gi", "64G", "1e3"), parsed exactly.

The grammar is Kubernetes' own (``k8s.io/apimachinery/pkg/api/resource``)::

    quantity        ::= sign? number suffix
    number          ::= digits | digits "." digits? | "." digits
    suffix          ::= binarySI | decimalSI | decimalExponent
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei                  (powers of 1024)
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E       (powers of 1000)
    decimalExponent ::= ("e" | "E") sign? digits                    ("1e3" == 1000)

Values are kept as exact ``Fraction``s, never floats, so "0.1" + "0.2" cores is 300m and a
round trip through a manifest loses nothing. Shoal is stricter than Kubernetes where the lax
reading is almost always a mistake: negatives are rejected, memory-like quantities must be whole
bytes ("500m" of memory is half a byte), and CPU cannot be finer than 1m (Kubernetes' own rule).
Common slips ("4GB", "4gi", "4 Gi") are rejected with the spelling that was probably meant.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Literal

from shoal.errors import SpecError

__all__ = [
    "Quantity",
    "QuantityFormat",
    "canonical",
    "parse_cpu",
    "parse_memory",
    "parse_quantity",
    "to_bytes",
    "to_cores",
    "to_millicores",
]

QuantityFormat = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

_BINARY: dict[str, int] = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # 1024**n
_DECIMAL: dict[str, int] = {  # 10**n
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}
_DECIMAL_BY_EXP = {exp: suffix for suffix, exp in _DECIMAL.items()}
# Kubernetes keeps nano precision at most; finer values round up to 1n when rendered.
_NANO = Fraction(1, 10**9)
# Bounds the work an exponent can cause ("1e999999999"); far beyond any real resource.
_MAX_EXPONENT = 30

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?P<suffix>[eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$"
)
# A number followed by anything: used only to explain why a string did not parse.
_NUMBER_THEN_REST = re.compile(
    r"^\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<rest>.*?)\s*$"
)

_CPU_EXAMPLES = '"500m", "2", "1.5" or 2'
_MEMORY_EXAMPLES = '"512Mi", "4Gi", "64G" or an int number of bytes'
_GENERIC_EXAMPLES = '"500m", "2", "4Gi", "64G" or "1e3"'


@dataclass(frozen=True)
class Quantity:
    """An exact, non-negative Kubernetes quantity.

    ``value`` is the amount in base units (cores or bytes); ``format`` remembers how it was
    written (decimal SI, binary SI or decimal exponent), which ``canonical`` keeps, as
    Kubernetes does. ``str(q)`` is the canonical text used in manifests. Quantities are
    equal when their amounts are.
    """

    value: Fraction
    # How it was written, for rendering only: "1024" and 1024 bytes as "1Ki" are equal.
    format: QuantityFormat = dataclasses.field(default="DecimalSI", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.value, Fraction):
            raise SpecError(
                "Quantity.value", self.value, "must be a fractions.Fraction",
                'build quantities with parse_quantity("4Gi") instead',
            )
        if self.value < 0:
            raise SpecError(
                "Quantity.value", self.value, "must not be negative", "use a value >= 0"
            )
        if self.format not in ("DecimalSI", "BinarySI", "DecimalExponent"):
            raise SpecError(
                "Quantity.format", self.format, "is not a quantity format",
                'use "DecimalSI", "BinarySI" or "DecimalExponent"',
            )

    def __str__(self) -> str:
        return canonical(self)


def parse_quantity(value: object, *, field: str = "quantity") -> Quantity:
    """Parse a quantity given as a string, an int or a float (unitless) into a ``Quantity``.

    ``field`` names the user's field in the error raised for a bad value.
    """
    return _parse(value, field=field, examples=_GENERIC_EXAMPLES, allow_float=True)


def parse_cpu(value: object, *, field: str = "cpu") -> Quantity:
    """Parse a CPU amount: an int or float number of cores, or a string ("500m", "1.5")."""
    q = _parse(value, field=field, examples=_CPU_EXAMPLES, allow_float=True)
    if (q.value * 1000).denominator != 1:
        raise SpecError(
            field, value, "CPU cannot be finer than 1m (a thousandth of a core)",
            f"round it to whole millicores, e.g. {_render_millicores(q.value)!r}",
        )
    return q


def parse_memory(value: object, *, field: str = "memory") -> Quantity:
    """Parse a memory-like amount (memory, disk, shm): an int of bytes or a string ("4Gi").

    An int that is a whole number of KiB renders in binary units (``8 * 2**30`` -> "8Gi");
    other ints render as plain bytes.
    """
    if isinstance(value, float) and not isinstance(value, bool):
        raise SpecError(
            field, value, "a memory-like amount is an int number of bytes or a string",
            f'write it with a unit, e.g. "{_float_hint(value)}", or pass whole bytes as an int',
        )
    q = _parse(value, field=field, examples=_MEMORY_EXAMPLES, allow_float=False)
    if q.value.denominator != 1:
        number = _NUMBER_THEN_REST.match(value) if isinstance(value, str) else None
        if number and number.group("rest") == "m":
            n = number.group("number")
            fix = f'"m" means milli (a thousandth of a byte); did you mean "{n}Mi" or "{n}M"?'
        else:
            fix = f"round it to whole bytes, e.g. {math.ceil(q.value)}"
        raise SpecError(field, value, "must be a whole number of bytes", fix)
    if isinstance(value, int) and q.value >= 1024 and q.value % 1024 == 0:
        return Quantity(q.value, "BinarySI")
    return q


def canonical(q: Quantity) -> str:
    """The canonical text of ``q``, as Kubernetes renders it ("1.5" -> "1500m", "1e3" -> "1e3").

    Binary quantities use the largest power of 1024 that divides them ("1.5Gi" -> "1536Mi");
    those below 1Ki or not whole fall back to decimal SI. Decimal quantities use the largest
    power of 1000 that keeps an integer mantissa, rounded up to nano precision.
    """
    value = q.value
    if q.format == "BinarySI" and value.denominator == 1 and value >= 1024:
        n = value.numerator
        exp = 0
        while exp < 6 and n % 1024 == 0:
            n //= 1024
            exp += 1
        if exp == 0:
            return str(n)
        return f"{n}{next(s for s, e in _BINARY.items() if e == exp)}"
    nanos = math.ceil(value / _NANO)
    if nanos == 0:
        return "0"
    exp10 = -9
    while exp10 < 18 and nanos % 1000 == 0:
        nanos //= 1000
        exp10 += 3
    if q.format == "DecimalExponent":
        return f"{nanos}e{exp10}" if exp10 else str(nanos)
    return f"{nanos}{_DECIMAL_BY_EXP[exp10]}"


def to_bytes(q: Quantity) -> int:
    """Whole bytes in ``q``, rounded up (parse_memory already guarantees whole bytes)."""
    return math.ceil(q.value)


def to_cores(q: Quantity) -> float:
    """CPU cores in ``q`` as a float (use ``q.value`` for the exact amount)."""
    return float(q.value)


def to_millicores(q: Quantity) -> int:
    """Millicores in ``q``, rounded up (parse_cpu already guarantees whole millicores)."""
    return math.ceil(q.value * 1000)


# --- parsing -------------------------------------------------------------------------------


def _parse(value: object, *, field: str, examples: str, allow_float: bool) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool):
        raise SpecError(field, value, "a bool is not a quantity", f"use {examples}")
    if isinstance(value, int):
        if value < 0:
            raise SpecError(field, value, "must not be negative", f"use {-value}")
        return Quantity(Fraction(value))
    if isinstance(value, float):
        if not allow_float:  # pragma: no cover - parse_memory rejects floats with its own hint
            raise SpecError(field, value, "must be an int or a string", f"use {examples}")
        if math.isnan(value) or math.isinf(value):
            raise SpecError(field, value, "must be a finite number", f"use {examples}")
        if value < 0:
            raise SpecError(field, value, "must not be negative", f"use {-value}")
        # repr() is the shortest decimal that round-trips, so 0.1 means 1/10, not the binary
        # float nearest to it.
        return Quantity(Fraction(Decimal(repr(value))))
    if not isinstance(value, str):
        raise SpecError(
            field, value, f"must be a number or a string, not {type(value).__name__}",
            f"use {examples}",
        )
    match = _QUANTITY.match(value)
    if match is None:
        raise SpecError(field, value, _RULE, _suggest(value, examples))
    if match.group("sign") == "-":
        raise SpecError(field, value, "must not be negative", f"use {value[1:]!r}")
    try:
        number = Fraction(Decimal(match.group("number")))
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise SpecError(field, value, _RULE, _suggest(value, examples)) from None
    suffix = match.group("suffix")
    if suffix in _BINARY:
        return Quantity(number * 1024 ** _BINARY[suffix], "BinarySI")
    if suffix in _DECIMAL:
        return Quantity(number * Fraction(10) ** _DECIMAL[suffix], "DecimalSI")
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_EXPONENT:
        raise SpecError(
            field, value, f"the exponent must be between -{_MAX_EXPONENT} and {_MAX_EXPONENT}",
            f"use {examples}",
        )
    return Quantity(number * Fraction(10) ** exponent, "DecimalExponent")


_RULE = (
    "is not a Kubernetes quantity (a number with an optional suffix: n u m k M G T P E, "
    "Ki Mi Gi Ti Pi Ei, or an exponent such as e3)"
)


def _suggest(value: str, examples: str) -> str:
    """A fix for a string that did not parse: the spelling that was most likely meant."""
    generic = f"use {examples}"
    m = _NUMBER_THEN_REST.match(value)
    if m is None:
        return generic
    number, rest = m.group("number").lstrip("+"), m.group("rest")
    candidates: list[str] = []
    upper = rest.upper()
    if rest in _BINARY or rest in _DECIMAL:
        candidates = [f"{number}{rest}"]  # only whitespace was wrong
    elif len(upper) == 2 and upper[1] == "B" and upper[0] in "KMGTPE":
        # "4GB" / "4gb": bytes with a decimal or a binary prefix; both are plausible.
        candidates = [f"{number}{_decimal_letter(upper[0])}", f"{number}{upper[0]}i"]
    elif len(upper) == 3 and upper.endswith("IB") and upper[0] in "KMGTPE":
        candidates = [f"{number}{upper[0]}i"]  # "4GiB" -> "4Gi"
    elif len(upper) == 2 and upper[1] == "I" and upper[0] in "KMGTPE":
        candidates = [f"{number}{upper[0]}i"]  # "4gi" / "4GI" -> "4Gi"
    elif len(rest) == 1 and upper in "KMGTPE":
        # a single letter in the wrong case: "4K" (kilo is lower-case k), "4g", "4t"
        candidates = [f"{number}{_decimal_letter(upper)}", f"{number}{upper}i"]
    elif rest.lower() in _UNIT_WORDS:
        candidates = [number]  # "4 bytes", "2 cores": the unit is implied
    if not candidates:
        return generic
    shown = " or ".join(repr(c) for c in candidates)
    return f"did you mean {shown}?"


_UNIT_WORDS = ("b", "byte", "bytes", "core", "cores", "cpu", "cpus", "vcpu", "vcpus")


def _decimal_letter(letter: str) -> str:
    return "k" if letter == "K" else letter


def _render_millicores(value: Fraction) -> str:
    milli = math.ceil(value * 1000)
    return f"{milli}m" if milli % 1000 else str(milli // 1000)


def _float_hint(value: float) -> str:
    if math.isnan(value) or math.isinf(value) or value < 0:
        return "4Gi"
    return f"{value:g}Gi"
