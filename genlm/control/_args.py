"""Checks of numeric arguments shared by the public entry points.

NumPy scalars (`np.int64(4)`, `np.float32(0.5)`) are numbers like Python's; a bool
is never a number here (`True` is a `TypeError`), although Python counts it as an int.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_BOOLS = (bool, np.bool_)


def reject_bool(name: str, value: Any) -> None:
    """Raises `TypeError` when `value` is a bool (Python's or NumPy's)."""
    if isinstance(value, _BOOLS):
        raise TypeError(f"{name} must be a number, got {value!r} (a bool)")


def is_int(value: Any) -> bool:
    """Whether `value` is an integer (Python or NumPy), bools excluded."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, _BOOLS)


def is_real(value: Any) -> bool:
    """Whether `value` is a real number (Python or NumPy int or float), bools excluded."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, _BOOLS)


def positive_int(name: str, value: Any) -> int:
    """`value` as an int when it is an integer ≥ 1.

    Raises:
        TypeError: a bool.
        ValueError: anything else that is not an integer ≥ 1.
    """
    reject_bool(name, value)
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


__all__ = ["is_int", "is_real", "positive_int", "reject_bool"]
