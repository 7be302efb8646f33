"""The whole-document check for keywords the recognizer reads only as a superset.

Where a schema uses a keyword that the byte recognizer enforces only loosely
(`not`, `uniqueItems`, `oneOf` with overlapping branches, ...), a complete document
is also validated against the whole schema by `jsonschema`, under the same reading
of values the recognizer uses:

- numbers are exact decimals (`parse_float` gives a `Decimal`, so `1.0` is not an
  integer, and `0.1` in the schema is the decimal 0.1); `multipleOf` is decided
  exactly on decimals (`x / d` an integer), not in floats;
- `pattern` is `re.search` with ASCII classes, as the recognizer reads it;
- `format` is checked for exactly the formats of `_json_format`, with the same
  expressions, and no retrieval is ever made.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from genlm.control.constraints.json_schema._json_format import format_checker
from genlm.control.constraints.json_schema._json_guard import no_retrieval_registry
from genlm.control.constraints.json_schema._json_number import exact_value


def _decimals(value: Any) -> Any:
    """`value` with every float replaced by the decimal it spells (iteratively)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, (dict, list)):
        return value
    out = {} if isinstance(value, dict) else []
    stack = [(value, out)]
    while stack:
        src, dst = stack.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for k, v in items:
            if isinstance(v, (dict, list)):
                new = {} if isinstance(v, dict) else []
                stack.append((v, new))
            else:
                new = Decimal(repr(v)) if isinstance(v, float) else v
            if isinstance(dst, dict):
                dst[k] = new
            else:
                dst.append(new)
    return out


def is_multiple(x: Decimal, d: Decimal) -> bool:
    """Whether `x / d` is an integer, exactly (`d > 0`), at a cost bounded by the
    digits of `x` and `d` and the logarithm of their exponents.

    With `|x| = m1·10^a` and `d = m2·10^b` (integer digits `m1`, `m2`) and `k = a - b`:
    for `k ≥ 0`, `x/d = m1·10^k / m2` is an integer iff `m2` divides
    `m1·(10^k mod m2)`; for `k < 0` it is `m1 / (m2·10^-k)`, never an integer once
    `10^-k` exceeds `m1` (so `-k` is bounded by the digits of `m1`). Nothing here
    rounds or overflows: the digits are read with `as_tuple` (no context), so an
    exponent of a million is as cheap as one of three.
    """
    if x.is_zero():
        return True
    _, xd, xe = x.as_tuple()
    _, dd, de = d.as_tuple()
    m1, m2 = _digits_int(xd), _digits_int(dd)
    k = xe - de
    if k >= 0:
        return m1 * pow(10, k, m2) % m2 == 0
    if -k > len(xd):  # m1 < 10**-k ≤ m2·10**-k: not a multiple
        return False
    return m1 % (m2 * 10 ** -k) == 0


def _digits_int(digits: tuple) -> int:
    """The integer whose decimal digits are `digits` (any count: no str conversion,
    so Python's limit on int/str conversions does not apply)."""
    return int(Decimal((0, digits, 0)))


def _multiple_of(validator, d, instance, schema):
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "number"):
        return
    if not is_multiple(Decimal(instance), Decimal(d)):
        yield ValidationError(f"{instance!r} is not a multiple of {d}")


def search(pattern: str, text: str) -> bool:
    """`re.search(pattern, text, re.ASCII)`: jsonschema's reading of `pattern`, with
    the ASCII classes the recognizer uses. Only patterns the byte automaton does not
    express (lookarounds, anchors inside, over `MAX_PATTERN_SIZE`) are read here
    alone; `re` backtracks, so such a pattern costs what it costs in any validator."""
    return re.search(pattern, text, re.ASCII) is not None


def _pattern(validator, pattern, instance, schema):
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


class _LongInt(int):
    """An integer of more digits than Python converts to text by default: `jsonschema`
    writes `repr(instance)` into its error messages, which would raise `ValueError`
    (the int/str conversion limit) instead of answering."""

    def __repr__(self) -> str:
        return f"<an integer of {_digit_count(self)} digits>"

    __str__ = __repr__


def _digit_count(n: int) -> int:
    return len(Decimal(n).as_tuple().digits)


def _integer(text: str) -> int:
    """A JSON integer spelling as an int (a `_LongInt` beyond 4000 digits)."""
    n = int(Decimal(text))
    return _LongInt(n) if len(text) > 4000 else n


class DocumentCheck:
    """`check(data)`: whether the bytes `data` are valid under `schema` (read as above)."""

    def __init__(self, schema: Any):
        from jsonschema import validators

        base = validators.validator_for(schema)
        cls = validators.extend(base, {"multipleOf": _multiple_of, "pattern": _pattern})
        self.validator = cls(_decimals(schema), registry=no_retrieval_registry(),
                             format_checker=format_checker())

    def __call__(self, data: bytes) -> bool:
        try:
            value = json.loads(data.decode("utf-8"), parse_float=exact_value, parse_int=_integer)
        except (ValueError, RecursionError):
            return False
        try:
            return bool(self.validator.is_valid(value))
        except RecursionError:
            raise ValueError("the document is nested too deeply to validate") from None


__all__ = ["DocumentCheck", "is_multiple"]
