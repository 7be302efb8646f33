"""JSON numbers read byte by byte: the spelling automaton and exact range reachability.

A number prefix `t` (e.g. `-12.5e`) can be completed to a set of values `C(t)`.
`reachable(t, num)` decides exactly whether `C(t)` meets the allowed values of a
`Num` (an interval with open or closed ends, or a finite set of decimals), using
exact decimal arithmetic:

- integer spelling `P…`: the integers `P·10^j + r`, `0 ≤ r < 10^j`, `j ≥ 0`;
- mantissa digits `S` (leading zeros dropped, `S ≠ ""`) with the exponent still
  free: `⋃_k [0.S·10^k, (0.S + 10^-|S|)·10^k)`;
- a fixed mantissa `M` and exponent digits `X`: `M·10^E` for `E` spelled `X…`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

DIGITS = frozenset(b"0123456789")
_HUGE = 1100  # digits: more than any schema number has (see _json_guard.MAX_INT_DIGITS)
NUMBER_START = frozenset(b"-0123456789")


class Bounds(NamedTuple):
    """`lo ≤ x ≤ hi` (`<` where the end is not `incl`); None: unbounded."""

    lo: Decimal | None = None
    lo_incl: bool = True
    hi: Decimal | None = None
    hi_incl: bool = True


def spelling_step(text: str, byte: int, integer: bool) -> bool:
    """Whether `text + chr(byte)` is a prefix of a JSON number (no fraction or
    exponent when `integer`)."""
    c = chr(byte)
    if text == "":
        return c == "-" or byte in DIGITS
    last = text[-1]
    if c in "+-":
        return last in "eE"
    if byte in DIGITS:
        return text not in ("0", "-0")
    if c == ".":
        return not integer and last.isdigit() and "." not in text and "e" not in text.lower()
    if c in "eE":
        return not integer and last.isdigit() and "e" not in text.lower()
    return False


def unbounded(num) -> bool:
    """Whether `num` allows every number of its spelling (no bound, no value list):
    then only the shape of a prefix matters (`number_shape`)."""
    return num.values is None and num.bounds.lo is None and num.bounds.hi is None


def number_shape(text: str) -> str:
    """The shortest number prefix that continues and ends as `text` does: the sign,
    `0` or `1` for the integer digits, one `0` for fraction digits, `e`, the exponent's
    sign as `+`, one `0` for exponent digits (`-120.50E-7` → `-1.0e+0`).

    `spelling_step` and `is_complete` read only these features (a leading zero, the
    last character, which parts have begun), so for an unbounded number a prefix and
    its shape have the same next bytes and the same completeness, and
    `number_shape(number_shape(t) + c) == number_shape(t + c)`: the recognizer keeps
    the shape in place of the text, and two numbers of one shape are one state."""
    sign = "-" if text[:1] == "-" else ""
    mant, e, exp = text[len(sign) :].lower().partition("e")
    whole, dot, frac = mant.partition(".")
    out = sign + ("" if not whole else "0" if whole == "0" else "1") + dot + ("0" if frac else "")
    if e:
        signed = exp[:1] in ("+", "-")
        out += "e" + ("+" if signed else "") + ("0" if exp[signed:] else "")
    return out


def is_complete(text: str) -> bool:
    return bool(text) and text[-1].isdigit()


def exact_value(text: str) -> Decimal:
    """The value of a complete number spelling. An exponent of more than 17 digits
    (beyond what `Decimal` reads) is clamped to `±10**17`: that moves the value but
    not its order against any schema number (those have under 1100 digits)."""
    mant, e, exp = text.lower().partition("e")
    if e and len(exp.lstrip("+-").lstrip("0")) > 17:
        exp = ("-" if exp.startswith("-") else "") + "1" + "0" * 17
    return Decimal(mant + e + exp)


def value_ok(text: str, num) -> bool:
    """Whether the complete number `text` is allowed by `num`."""
    d = exact_value(text)
    if num.values is not None:
        return any(d == v for v in num.values)
    return _in(d, num.bounds)


def _in(d: Decimal, b: Bounds) -> bool:
    if b.lo is not None and (d < b.lo or (d == b.lo and not b.lo_incl)):
        return False
    return b.hi is None or d < b.hi or (d == b.hi and b.hi_incl)


def reachable(text: str, num) -> bool:
    """Whether some completion of the number prefix `text` is allowed by `num`."""
    if num.values is not None:
        return any(_reach(text, num.integer, Bounds(v, True, v, True)) for v in num.values)
    return _reach(text, num.integer, num.bounds)


def _mirror(b: Bounds) -> Bounds:
    return Bounds(None if b.hi is None else -b.hi, b.hi_incl, None if b.lo is None else -b.lo, b.lo_incl)


def _reach(text: str, integer: bool, b: Bounds) -> bool:
    if text == "":
        return _magnitude("", integer, b) or _magnitude("", integer, _mirror(b))
    if text[0] == "-":
        return _magnitude(text[1:], integer, _mirror(b))
    return _magnitude(text, integer, b)


def _magnitude(t: str, integer: bool, b: Bounds) -> bool:
    """Whether an unsigned completion of `t` has its value in `b`."""
    low = t.lower()
    if "e" in low:
        mant, _, exp = low.partition("e")
        return _with_exponent(Decimal(mant.rstrip(".") or "0"), exp, b)
    whole, _, frac = t.partition(".")
    if integer and len(whole) > _HUGE:  # beyond every schema number
        return b.hi is None
    if integer:
        if whole == "":
            return _ints_meet(None, b)
        if whole == "0":
            return _in(Decimal(0), b)
        return _ints_meet(int(whole), b)
    digits = (whole + frac).lstrip("0")
    if digits == "":  # zero so far: every magnitude is still reachable
        return _meets(Decimal(0), True, None, True, b)
    return _decades_meet(digits, b)


def _meets(lo, lo_incl, hi, hi_incl, b: Bounds) -> bool:
    """Whether the real interval (lo, hi) with the given ends meets `b`."""
    if b.lo is not None and (lo is None or b.lo > lo or (b.lo == lo and not b.lo_incl)):
        lo, lo_incl = b.lo, b.lo_incl
    if b.hi is not None and (hi is None or b.hi < hi or (b.hi == hi and not b.hi_incl)):
        hi, hi_incl = b.hi, b.hi_incl
    if lo is None or hi is None:
        return True
    return lo < hi or (lo == hi and lo_incl and hi_incl)


def _int_range(b: Bounds) -> tuple[int, int | None]:
    """The nonnegative integers in `b` as `[u, v]` (v None: unbounded)."""
    u = 0
    if b.lo is not None:
        f = int(b.lo.to_integral_value(rounding="ROUND_FLOOR"))
        u = max(0, f + 1 if (f < b.lo or not b.lo_incl) else f)
    v = None
    if b.hi is not None:
        c = int(b.hi.to_integral_value(rounding="ROUND_CEILING"))
        v = c - 1 if (c > b.hi or not b.hi_incl) else c
    return u, v


def _ints_meet(prefix: int | None, b: Bounds) -> bool:
    """Whether an integer spelled `prefix…` (any integer ≥ 0 when None) lies in `b`."""
    u, v = _int_range(b)
    return _prefixed_ints_meet(prefix, u, v)


def _prefixed_ints_meet(prefix: int | None, u: int, v: int | None) -> bool:
    if v is not None and u > v:
        return False
    if prefix is None:
        return True
    j = max(0, len(str(u)) - len(str(prefix)) - 1)
    while True:
        lo, hi = prefix * 10**j, (prefix + 1) * 10**j - 1
        if v is not None and lo > v:
            return False
        if hi >= u:
            return True
        j += 1


def _decades_meet(digits: str, b: Bounds) -> bool:
    """Whether `⋃_k [0.digits·10^k, (0.digits + 10^-n)·10^k)` meets `b` (n = len(digits))."""
    if b.hi is None:
        return True
    if b.lo is None or b.lo <= 0:
        return b.hi > 0
    if b.hi.adjusted() - b.lo.adjusted() >= 3:  # a whole decade lies inside
        return True
    n, top = len(digits), tuple(int(c) for c in _successor(digits))
    low = tuple(int(c) for c in digits)
    for k in range(b.lo.adjusted() - 1, b.hi.adjusted() + 3):
        lo, hi = Decimal((0, low, k - n)), Decimal((0, top, k - n))
        if _meets(lo, True, hi, False, b):
            return True
    return False


def _successor(digits: str) -> str:
    """The decimal digits of `int(digits) + 1`, without converting (no digit limit)."""
    head = digits.rstrip("9")
    zeros = "0" * (len(digits) - len(head))
    if not head:
        return "1" + zeros
    return head[:-1] + str(int(head[-1]) + 1) + zeros


def _exponent_range(m: Decimal, b: Bounds) -> tuple[int | None, int | None, bool]:
    """The integers `E` with `m·10^E` in `b` (m > 0), as `(e_lo, e_hi, nonempty)`."""
    sign, digits, exp = m.as_tuple()

    def at(e: int) -> Decimal:
        return Decimal((0, digits, exp + e))

    e_lo = e_hi = None
    if b.lo is not None and b.lo > 0:
        e = b.lo.adjusted() - m.adjusted() - 1
        while not _in_lower(at(e), b):
            e += 1
        e_lo = e
    if b.hi is not None:
        if b.hi <= 0:
            return None, None, False
        e = b.hi.adjusted() - m.adjusted() + 1
        while not _in_upper(at(e), b):
            e -= 1
        e_hi = e
    return e_lo, e_hi, e_lo is None or e_hi is None or e_lo <= e_hi


def _in_lower(d: Decimal, b: Bounds) -> bool:
    return d > b.lo or (d == b.lo and b.lo_incl)


def _in_upper(d: Decimal, b: Bounds) -> bool:
    return d < b.hi or (d == b.hi and b.hi_incl)


def _with_exponent(m: Decimal, exp: str, b: Bounds) -> bool:
    """Whether `m·10^E` is in `b` for some exponent `E` spelled `exp…`."""
    if m == 0:
        return _in(Decimal(0), b)
    e_lo, e_hi, ok = _exponent_range(m, b)
    if not ok:
        return False
    sign = exp[:1] if exp[:1] in ("+", "-") else ""
    digits = exp[len(sign):]
    if sign == "" and digits == "":
        return True
    if sign == "-":  # E = -n
        u, v = (0 if e_hi is None else max(0, -e_hi)), (None if e_lo is None else -e_lo)
    else:
        u, v = (0 if e_lo is None else max(0, e_lo)), e_hi
    rest = digits.lstrip("0")
    if len(rest) > 40:  # beyond every exponent that can matter (|E| < 2300)
        return v is None
    return _prefixed_ints_meet(int(rest) if rest else None, u, v)


__all__ = ["Bounds", "spelling_step", "is_complete", "value_ok", "reachable", "NUMBER_START", "DIGITS"]
