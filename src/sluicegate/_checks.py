"""The argument checks every entry point shares, so one mistake reads the same everywhere.

A wrong type is a :class:`TypeError`, a wrong value a :class:`ValueError`,
both worded ``"<name> must be <what it takes>, not <value>"``. A ``bool`` is
never taken for a number: ``window=True`` is always a slip.
"""

from __future__ import annotations

import math
import os
from typing import overload

__all__ = [
    "check_callable",
    "check_count",
    "check_flag",
    "check_path",
    "check_seconds",
    "check_text",
]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@overload
def check_count(value: object, name: str, *, minimum: int = 0) -> int: ...
@overload
def check_count(value: object, name: str, *, minimum: int = 0, none: bool) -> int | None: ...
def check_count(value: object, name: str, *, minimum: int = 0, none: bool = False) -> int | None:
    """Return ``value`` if it is an int of at least ``minimum`` (or None, when ``none``).

    Raises:
        TypeError: ``value`` is not an int (nor None where None is allowed).
        ValueError: ``value`` is below ``minimum``.
    """
    if value is None and none:
        return None
    takes = f"an int >= {minimum}" + (" or None" if none else "")
    if not _is_int(value):
        raise TypeError(f"{name} must be {takes}, not {value!r}")
    assert isinstance(value, int)
    if value < minimum:
        raise ValueError(f"{name} must be {takes}, not {value!r}")
    return value


@overload
def check_seconds(value: object, name: str, *, zero: bool = True) -> float: ...
@overload
def check_seconds(value: object, name: str, *, zero: bool = True, none: bool) -> float | None: ...
def check_seconds(
    value: object, name: str, *, zero: bool = True, none: bool = False
) -> float | None:
    """Return ``value`` as a float if it is a finite number of seconds (> 0 unless ``zero``).

    Raises:
        TypeError: ``value`` is not an int or float (nor None where None is allowed).
        ValueError: ``value`` is negative, zero where zero is refused, NaN or infinite.
    """
    if value is None and none:
        return None
    bound = ">= 0" if zero else "> 0"
    takes = f"a finite number of seconds {bound}" + (" or None" if none else "")
    if not (_is_int(value) or isinstance(value, float)):
        raise TypeError(f"{name} must be {takes}, not {value!r}")
    assert isinstance(value, int | float)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be {takes}, not {value!r}")
    return float(value)


def check_flag(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool.

    Raises:
        TypeError: ``value`` is anything else (``1`` and ``"yes"`` included).
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def check_text(value: object, name: str) -> str:
    """Return ``value`` if it is a str.

    Raises:
        TypeError: ``value`` is anything else (``None`` and ``bytes`` included).
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {value!r}")
    return value


def check_callable(value: object, name: str, *, none: bool = False) -> None:
    """Refuse ``value`` unless it is callable (or None, when ``none``).

    A class is callable too; it is taken, as a factory.

    Raises:
        TypeError: ``value`` cannot be called.
    """
    if value is None and none:
        return
    if not callable(value):
        takes = "callable" + (" or None" if none else "")
        raise TypeError(f"{name} must be {takes}, not {value!r}")


def check_path(value: object, name: str, *, none: bool = False) -> None:
    """Refuse ``value`` unless it is a path: a str or an ``os.PathLike`` (or None, when ``none``).

    Raises:
        TypeError: ``value`` is anything else.
    """
    if value is None and none:
        return
    if not isinstance(value, str | os.PathLike):
        takes = "a path (a str or os.PathLike)" + (" or None" if none else "")
        raise TypeError(f"{name} must be {takes}, not {value!r}")
