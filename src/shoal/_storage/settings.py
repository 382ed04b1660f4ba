"""Storage settings read from the env-var contract (`shoal._contract`), a bad value raised as
a SpecError that names the variable, its value, the rule and the fix.

The contract's readers raise ValueError (the contract imports nothing of Shoal); this is the
one place the storage layer turns that into the error a user reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from shoal.errors import SpecError

__all__ = ["checked"]

T = TypeVar("T")


def checked(read: Callable[[], T], name: str, rule: str, fix: str) -> T:
    """``read()`` of the variable ``name``; a bad value is a SpecError naming it."""
    try:
        return read()
    except ValueError as e:
        raise SpecError(field=name, value=os.environ.get(name), rule=f"{rule} ({e})",
                        fix=fix) from None
