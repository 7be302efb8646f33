"""JSON numbers as regexes of their spellings, for the JSON grammar (`_json_grammar`).

An integer range is a regular set of spellings (`-?(0|[1-9][0-9]*)`, `-0` being 0),
written digit by digit; a `number` is regular without bounds and with the lower
bound 0 alone (its sign and whether a digit is nonzero decide it). Other bounds on a
`number` are not regular once the exponent is free (`0.0…01e+k <= 1` compares `k`
with the count of zeros), so they are `Unwritable`.
"""

from __future__ import annotations

import math

from genlm.control.potential.built_in.json_schema import Num

INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+\-]?[0-9]+)?"


class Unwritable(Exception):
    """A shape the JSON grammar does not write (the message says which)."""


def number_regex(a: Num) -> str:
    """The spellings of the numbers of `a`: any integer range; a `number` without
    bounds, or bounded below by 0 alone (a bound elsewhere is not a regular set of
    spellings once exponents are free)."""
    if a.values is not None:
        raise Unwritable("a number with allowed values")
    b = a.bounds
    if a.integer:
        return integer_regex(_int_bound(b.lo, b.lo_incl, 1), _int_bound(b.hi, b.hi_incl, -1))
    if b.lo is None and b.hi is None:
        return NUMBER
    if b.hi is None and b.lo == 0:
        exp = r"(?:[eE][+\-]?[0-9]+)?"
        zero = r"0(?:\.0+)?" + exp
        positive = r"(?:0\.0*[1-9][0-9]*|[1-9][0-9]*(?:\.[0-9]+)?)" + exp
        return f"(?:{positive}|{zero}|-{zero})" if b.lo_incl else positive
    raise Unwritable("a number with bounds other than a lower bound of 0")


def _int_bound(x, incl: bool, side: int) -> int | None:
    """The least (side 1) or greatest (side -1) integer within the bound `x`."""
    if x is None:
        return None
    if side == 1:
        n = math.ceil(x)
        return n if incl or n != x else n + 1
    n = math.floor(x)
    return n if incl or n != x else n - 1


def integer_regex(lo: int | None, hi: int | None) -> str:
    """The spellings `-?(0|[1-9][0-9]*)` of the integers in `[lo, hi]` (None: no bound);
    `-0` is 0."""
    parts = []
    if hi is None or hi >= 0:
        parts.append(_naturals(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        parts.append("-" + _naturals(1 if hi is None or hi >= 0 else -hi, None if lo is None else -lo))
    if (lo is None or lo <= 0) and (hi is None or hi >= 0):
        parts.append("-0")
    if not parts:
        raise Unwritable("an empty integer range")
    return "(?:" + "|".join(parts) + ")"


def _naturals(a: int, b: int | None) -> str:
    """The decimal spellings (no leading zero) of the integers in `[a, b]`, `0 <= a <= b`."""
    if b is not None and len(str(b)) > 40:
        raise Unwritable("an integer bound of more than 40 digits")
    parts, n = [], len(str(a))
    top = len(str(b)) if b is not None else n
    for digits in range(n, top + 1):
        lo = a if digits == n else 10 ** (digits - 1)
        hi = b if b is not None and digits == top else 10**digits - 1
        parts.append(_same_length(str(lo), str(hi)))
    if b is None:
        parts.append(f"[1-9][0-9]{{{n},}}")
    return "(?:" + "|".join(parts) + ")"


def _same_length(x: str, y: str) -> str:
    """The digit strings from `x` to `y` (as many digits each, `x <= y`)."""
    if not x:
        return ""
    r = len(x) - 1
    if x[0] == y[0]:
        return x[0] + _same_length(x[1:], y[1:])
    if x[1:] == "0" * r and y[1:] == "9" * r:
        return f"[{x[0]}-{y[0]}]" + ("[0-9]" * r)
    parts = [x[0] + _same_length(x[1:], "9" * r)]
    if int(y[0]) - int(x[0]) > 1:
        parts.append(f"[{int(x[0]) + 1}-{int(y[0]) - 1}]" + ("[0-9]" * r))
    parts.append(y[0] + _same_length("0" * r, y[1:]))
    return "(?:" + "|".join(parts) + ")"


__all__ = ["number_regex", "integer_regex", "Unwritable", "INTEGER", "NUMBER"]
