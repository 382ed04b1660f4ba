"""CRC32C, the checksum of checkpoint objects: hardware-accelerated, and combinable.

``crc32c`` (the ICRAR package) runs the CPU's CRC instruction (SSE4.2 on x86-64, ARMv8 CRC),
several times sha256's speed on one core (benchmarks/checkpoint_io.py), takes any buffer (a
``memoryview`` piece, a ``bytearray``, an ``mmap``) without copying it, and releases the GIL on
large buffers, so pieces hash in parallel threads. ``google-crc32c`` is as fast, but its C
functions take only ``bytes``: every piece of a buffer would be copied first.

CRC32C is a checksum, not a content address: it catches corruption (torn writes, flipped bits,
truncation), not a forger. Content addresses (blobs, cache keys, code bundles) stay sha256.

The pieces of an object can be checksummed separately, in any order, and combined into the
CRC32C of the whole (``combine``): the value a commit records is the standard CRC32C of the
object's bytes, the same that ``gsutil hash -c`` prints and that S3 computes for
``x-amz-checksum-crc32c``, whatever pieces a write or a ranged download was cut into.
"""

from __future__ import annotations

import functools

import crc32c as _crc32c

__all__ = ["Crc32c", "combine", "crc32c"]

# The CRC32C (Castagnoli) polynomial, bit-reflected as the checksum itself is.
_POLY = 0x82F63B78


def crc32c(data: object, value: int = 0) -> int:
    """The CRC32C of ``data`` (any buffer), continued from ``value``."""
    return _crc32c.crc32c(data, value)  # type: ignore[arg-type]


class Crc32c:
    """A hashlib-shaped running CRC32C (``update``), for code that hashes either way."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: object) -> None:
        self.value = _crc32c.crc32c(data, self.value)  # type: ignore[arg-type]


def _mulmod(a: int, b: int) -> int:
    """a·b modulo the polynomial, both bit-reflected (x^0 is the top bit)."""
    product = 0
    bit = 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


@functools.lru_cache(maxsize=64)
def _shift(length: int) -> int:
    """x^(8·length) modulo the polynomial: what appending ``length`` bytes does to a CRC.

    Cached: the pieces of a write are all one size but the last, so this runs once or twice
    per size (square and multiply, ~30 products of a few microseconds each).
    """
    result = 1 << 31  # x^0
    square = 1 << 30  # x^1, squared at each bit of the exponent
    exponent = 8 * length
    while exponent:
        if exponent & 1:
            result = _mulmod(square, result)
        square = _mulmod(square, square)
        exponent >>= 1
    return result


def combine(first: int, second: int, second_length: int) -> int:
    """The CRC32C of A+B from the CRC32C of A, that of B and B's length."""
    if second_length == 0:
        return first
    return _mulmod(_shift(second_length), first) ^ second
