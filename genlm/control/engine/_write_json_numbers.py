"""JSON numbers as regexes of their spellings, for the JSON grammar (`_write_json`).

An integer range is a regular set of spellings (`-?(0|[1-9][0-9]*)`, `-0` being 0),
written digit by digit; a `number` is regular without bounds and with the lower
bound 0 alone (its sign and whether a digit is nonzero decide it). Other bounds on a
`number` are not regular once the exponent is free (`0.0…01e+k <= 1` compares `k`
with the count of zeros): `number_regex` raises `NeedsCheck` for them, and the
grammar is then written twice (`Spelling`): `SUB` writes the spellings without an
exponent whose value is in the bounds (regular: the integer part digit by digit,
the fraction digit by digit against the bounds' digits), a subset of the numbers;
`SUP` adds every spelling with an exponent, a superset. (The subset also takes the
exponents -8..8: for each such `k`, `m e k` is within the bounds iff `m` is within
them divided by `10**k`, a range again; so a digit token that only an exponent
brings back into range, `999` under `maximum: 90`, is in the subset's mask.) The engine serves the two
and the tokens between them are checked exactly (`_json_checked`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from enum import Enum

from genlm.control.constraints.json_schema import Num

INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = INTEGER + r"(?:\.[0-9]+)?(?:[eE][+\-]?[0-9]+)?"


class Spelling(Enum):
    """Which spellings of a bounded `number` the grammar writes (its bounds elsewhere
    than a lower bound of 0 make its spellings with an exponent a non-regular set)."""

    EXACT = "exact"  # exactly its spellings: a bounded number cannot be written
    SUB = "sub"  # the spellings without exponent (and small exponents): a subset
    SUP = "sup"  # those and every spelling with an exponent: a superset
    GATED = "gated"  # a superset exact on every spelling without an exponent


class Unwritable(Exception):
    """A shape the JSON grammar does not write (the message says which). Raised and
    caught inside the writer only: `_write_json.schema_grammar` returns an outcome."""


class NeedsCheck(Unwritable):
    """A shape written only as a subset and a superset (`Spelling.SUB` and `SUP`)."""


EXPONENT = r"[eE][+\-]?[0-9]+"
POSITIVE = r"(?:0\.0*[1-9][0-9]*|[1-9][0-9]*(?:\.[0-9]+)?)"  # mantissas of a value > 0
ZERO = r"0(?:\.0+)?"  # mantissas of 0 (unsigned)
EXPONENT_NUMBER = INTEGER + r"(?:\.[0-9]+)?" + EXPONENT
MAX_DIGITS = 40  # digits of a bound written digit by digit
SUB_EXPONENTS = 8  # the subset grammar spells exponents -8..8 (so that `999` is a prefix: 999e-2)


def number_regex(a: Num, spelling: Spelling = Spelling.EXACT) -> str:
    """The spellings of the numbers of `a`: any integer range; a `number` without
    bounds, or bounded below by 0 alone (a bound elsewhere is not a regular set of
    spellings once exponents are free: `NeedsCheck` for `Spelling.EXACT`; for `SUB`
    the spellings without exponent within the bounds, for `SUP` those and every
    spelling with an exponent, for `GATED` see `exponent_mantissas`)."""
    if a.values is not None:
        raise Unwritable("a number with allowed values")
    b = a.bounds
    if a.integer:
        return integer_regex(_int_bound(b.lo, b.lo_incl, 1), _int_bound(b.hi, b.hi_incl, -1))
    if b.lo is None and b.hi is None:
        return NUMBER
    if b.hi is None and b.lo == 0:
        exp = f"(?:{EXPONENT})?"
        zero = ZERO + exp
        positive = POSITIVE + exp
        return f"(?:{positive}|{zero}|-{zero})" if b.lo_incl else positive
    if spelling is Spelling.EXACT:
        raise NeedsCheck("a number with bounds other than a lower bound of 0")
    plain = decimal_regex(b.lo, b.lo_incl, b.hi, b.hi_incl)
    if spelling is Spelling.GATED:
        gate = exponent_mantissas(b.lo, b.lo_incl, b.hi, b.hi_incl)
        if gate is None:
            raise NeedsCheck("a bounded number whose mantissas are not gated by sign")
        scaled = gate + EXPONENT
        return scaled if plain is None else f"(?:{plain}|{scaled})"
    if spelling is Spelling.SUB:
        parts = [] if plain is None else [plain]
        for k in range(-SUB_EXPONENTS, SUB_EXPONENTS + 1):  # m e k within the bounds: m within them / 10**k
            scaled = [None if x is None else x.scaleb(-k) for x in (b.lo, b.hi)]
            m = decimal_regex(scaled[0], b.lo_incl, scaled[1], b.hi_incl)
            if m is not None:
                parts.append(m + _exponent(k))
        if not parts:
            raise Unwritable("a bounded number with no spelling of a small exponent")
        return "(?:" + "|".join(parts) + ")"
    return EXPONENT_NUMBER if plain is None else f"(?:{plain}|{EXPONENT_NUMBER})"


def _every_positive(lo, lo_incl: bool, hi, hi_incl: bool) -> bool | None:
    """Whether some power of ten brings every positive `m` within the bounds (True),
    none (False), or only some (None). For `0 < lo`: `m * 10**k` lands in
    `[lo, 10 lo)` (and in `(lo, 10 lo]`) for one `k`, so every `m` does iff that
    decade fits under `hi`."""
    if hi is not None and hi <= 0:
        return False
    if hi is None or lo is None or lo <= 0:
        return True  # large k passes any lo; small k lands in (0, hi)
    ten = 10 * lo
    return True if hi > ten or (hi == ten and (lo_incl or hi_incl)) else None


def exponent_mantissas(lo, lo_incl: bool, hi, hi_incl: bool) -> str | None:
    """The mantissas `m` (spellings without exponent, `-?(0|[1-9][0-9]*)(\\.[0-9]+)?`)
    such that `m e k` is within the bounds for some integer `k`, where that set is
    decided by the sign alone (each sign: every mantissa or none; zero by whether 0 is
    within); None where it is not (a positive or negative range narrower than a
    decade), and None where no mantissa is.

    With it, `plain | mantissas e k` spells exactly the numbers within the bounds on
    every spelling without an exponent, and its prefixes without an exponent are
    exactly the prefixes of those numbers (a mantissa may always grow, and `k` is
    free); only spellings with an exponent are a superset (`_json_checked`)."""
    pos = _every_positive(lo, lo_incl, hi, hi_incl)
    neg = _every_positive(None if hi is None else -hi, hi_incl, None if lo is None else -lo, lo_incl)
    if pos is None or neg is None:
        return None
    zero = (lo is None or lo < 0 or (lo == 0 and lo_incl)) and (hi is None or hi > 0 or (hi == 0 and hi_incl))
    parts = ([POSITIVE] if pos else []) + (["-" + POSITIVE] if neg else []) + (["-?" + ZERO] if zero else [])
    return "(?:" + "|".join(parts) + ")" if parts else None


def _exponent(k: int) -> str:
    """The spellings of the exponent `k` (`e`/`E`, a sign, leading zeros allowed)."""
    if k == 0:
        return r"[eE][+\-]?0+"
    return (r"[eE]\+?0*" if k > 0 else r"[eE]-0*") + str(abs(k))


def _digits_of(x: Decimal) -> tuple[int, str]:
    """`x >= 0` as its integer part and its fraction digits (no trailing zero)."""
    whole = int(x)
    frac = x - whole
    text = "" if frac == 0 else format(frac, "f").split(".")[1].rstrip("0")
    if len(str(whole)) > MAX_DIGITS or len(text) > MAX_DIGITS:
        raise Unwritable(f"a number bound of more than {MAX_DIGITS} digits")
    return whole, text


def _fraction(lo, lo_strict: bool, hi, hi_strict: bool):
    """Digit strings `S` (after the point) with `0.S` above `0.lo` (None: no bound;
    strictly where `lo_strict`) and below `0.hi`: `(regex of the nonempty S, whether
    the empty one is in)`, or None where no `S` is. `lo`, `hi`: digits, no trailing 0."""
    if lo == "" and not lo_strict:
        lo = None
    zero_ok = (lo is None) and (hi is None or hi != "" or not hi_strict)
    if hi == "":  # 0.S <= 0 (< 0: nothing): only zeros
        return None if hi_strict or not zero_ok else ("0+", True)
    if lo is None and hi is None:
        return "[0-9]+", True
    if lo == "" and hi is None:  # 0.S > 0: some nonzero digit
        return "[0-9]*[1-9][0-9]*", False
    groups: dict = {}
    for c in range(10):
        if lo is None:
            low = None
        else:
            d = int(lo[0]) if lo else 0
            if c < d:
                continue
            low = None if c > d else (lo[1:], lo_strict)
        if hi is None:
            high = None
        else:
            d = int(hi[0])
            if c > d:
                continue
            high = None if c < d else (hi[1:], hi_strict)
        groups.setdefault((low, high), []).append(c)
    alts = []
    for (low, high), cs in groups.items():
        head = _class(cs)
        if low is None and high is None:
            alts.append(head + "[0-9]*")
            continue
        rest = _fraction(low[0] if low else None, bool(low and low[1]),
                         high[0] if high else None, bool(high and high[1]))
        if rest is None:
            continue
        body, empty = rest
        alts.append(head + (f"(?:{body})?" if empty else f"(?:{body})"))
    if not alts and not zero_ok:
        return None
    return ("(?:" + "|".join(alts) + ")" if alts else "[^\\x00-\\U0010ffff]"), zero_ok


def _class(ds: list) -> str:
    return str(ds[0]) if len(ds) == 1 else f"[{ds[0]}-{ds[-1]}]" if ds == list(range(ds[0], ds[-1] + 1)) \
        else "[" + "".join(map(str, ds)) + "]"


def _with_fraction(whole: str, frac) -> str | None:
    if frac is None:
        return None
    body, empty = frac
    return whole + (f"(?:\\.(?:{body}))?" if empty else f"\\.(?:{body})")


def _nonnegative(a: Decimal, a_incl: bool, b, b_incl: bool) -> str | None:
    """Spellings `(0|[1-9][0-9]*)(\\.[0-9]+)?` of the values in `[a, b]` (`a >= 0`,
    b None: no upper end; open where not `incl`), or None where none is."""
    if b is not None and (b < a or (b == a and not (a_incl and b_incl))):
        return None
    ai, af = _digits_of(a)
    parts = []
    if b is not None:
        bi, bf = _digits_of(b)
        if ai == bi:
            return _with_fraction(str(ai), _fraction(af, not a_incl, bf, not b_incl))
    parts.append(_with_fraction(str(ai), _fraction(af, not a_incl, None, False)))
    if b is None:
        parts.append(_naturals(ai + 1, None) + "(?:\\.[0-9]+)?")
    else:
        if bi - 1 >= ai + 1:
            parts.append(_naturals(ai + 1, bi - 1) + "(?:\\.[0-9]+)?")
        parts.append(_with_fraction(str(bi), _fraction(None, False, bf, not b_incl)))
    parts = [p for p in parts if p is not None]
    return "(?:" + "|".join(parts) + ")" if parts else None


def decimal_regex(lo, lo_incl: bool, hi, hi_incl: bool) -> str | None:
    """The spellings `-?(0|[1-9][0-9]*)(\\.[0-9]+)?` (no exponent) of the values
    within the bounds (None: unbounded; `-0`, `-0.0` are 0), or None where none is."""
    zero = Decimal(0)
    parts = []
    if hi is None or hi >= 0:  # x >= 0
        a, a_incl = (lo, lo_incl) if lo is not None and lo >= 0 else (zero, True)
        parts.append(_nonnegative(a, a_incl, hi, hi_incl))
    if lo is None or lo <= 0:  # x <= 0, spelled - and |x|
        a, a_incl = (-hi, hi_incl) if hi is not None and hi <= 0 else (zero, True)
        neg = _nonnegative(a, a_incl, None if lo is None else -lo, lo_incl)
        parts.append(None if neg is None else "-" + neg)
    parts = [p for p in parts if p is not None]
    return "(?:" + "|".join(parts) + ")" if parts else None


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
    if b is not None and len(str(b)) > MAX_DIGITS:
        raise Unwritable(f"an integer bound of more than {MAX_DIGITS} digits")
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


__all__ = ["number_regex", "integer_regex", "decimal_regex", "exponent_mantissas", "Unwritable",
           "NeedsCheck", "Spelling", "INTEGER", "NUMBER"]
