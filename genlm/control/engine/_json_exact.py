"""When the compiled engine's JSON language equals `JsonSchema`'s: a whitelist.

`engine_difference(schema)` is None when every part of the schema has a shape on
which the engine (llguidance) and `JsonSchema` accept exactly the same byte
strings, prefixes included; otherwise it names the first part that may differ.
The rule is conservative: a shape is on the list only where the two were compared
exhaustively on every byte string up to a length over the bytes that matter, and
on generated documents (`tests/engine/test_json_engine.py`). On the list:

- annotations (`title`, `description`, ...), which constrain nothing;
- `type` drawn from `null`, `boolean`, `integer`, `number` and `array`;
- `integer` with bounds whose integer range does not contain 0 (the engine
  refuses `-0`, which is 0), or without bounds; `number` without bounds;
- numbers in `minimum`, `maximum`, `exclusive*`, `minItems`, `maxItems` only of
  magnitude below `2**53` (`EXACT_MAGNITUDE`), so that every integer bound the engine
  derives from them (`exclusiveMinimum: x` is `x + 1`) is a float exactly;
- `enum`/`const` whose values are all `null`, `true` or `false`;
- `items` (one schema on the list), `minItems`, `maxItems`;
- `anyOf` whose branches are all on the list, with no sibling assertions.

Off the list, with what differs (see docs/constraint-engines.md):

- strings, and so objects (keys are strings) and untyped values: the engine
  refuses the escape `\\/` and a raw DEL byte (0x7F); in objects it also writes
  declared properties in declaration order, undeclared ones after them, and
  refuses escapes in declared key names;
- a bound or item count of `2**53` or more: the engine reads these numbers as 64-bit
  floats and then as 64-bit integers, so `2**53 + 1` is read as `2**53`, bounds past
  `2**63` are clamped (under `[2**63, 2**64]` it accepts `2**63 - 1`), and a lower
  bound below `-2**63` crashes the interpreter (SIGSEGV); such schemas go to our own
  grammar writer (`_write_json`), which writes integer ranges digit by digit;
- `number` with bounds: the engine reads the bounds on the spelling (it refuses
  `3` as the start of `3e-1` under `maximum: 2.25`, and `-0` at a bound of 0);
- numbers and strings in `enum`/`const`: the engine matches the schema's own
  spelling (`1.0` is not `1`, `"\\u0061"` is not `"a"`);
- `$ref` and anything else (the keywords read only by `JsonSchema`: `allOf`,
  `oneOf`, `not`, `format`, `prefixItems`, ...; keys JSON Schema does not define;
  a draft-4 schema, whose `$ref` hides its siblings and which has no `const`): not
  established.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from genlm.control.constraints.json_schema import ANNOTATIONS

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
COUNTS = ("minItems", "maxItems")
ARRAY_KEYWORDS = ("type", "items") + COUNTS + BOUNDS
# Bounds and counts must be below this magnitude: the engine reads them as 64-bit
# floats (exact for every integer up to 2**53) and derives integer bounds from them
# (`exclusiveMinimum: 2**53` becomes 2**53 + 1, rounded back to 2**53), found by
# experiment in a subprocess (tests/engine/test_json_engine_magnitude.py).
EXACT_MAGNITUDE = 2**53
# Keys whose reading by the engine was compared (the others are refused at once).
ESTABLISHED = frozenset(ARRAY_KEYWORDS + ("enum", "const", "anyOf", "$ref", "properties",
                                          "required", "additionalProperties", "minLength",
                                          "maxLength", "pattern"))

# Why a shape is off the list: a short code (used in docs/constraint-engines.md) and what differs.
REASONS = {
    "strings": "strings: the engine refuses the escape \\/ and a raw DEL byte (0x7F), "
               "which JSON allows",
    "objects": "objects: the engine writes declared properties in declaration order "
               "(undeclared ones after them) and refuses escapes in declared key names; "
               "keys are strings",
    "any-value": "a value of any type (no 'type', or no 'items') includes strings and objects",
    "enum-spelling": "numbers or strings in enum/const: the engine matches the schema's "
                     "spelling (1.0 is not 1, \"\\u0061\" is not \"a\")",
    "number-bounds": "number with bounds: the engine reads bounds on the spelling (it refuses "
                     "3 as the start of 3e-1 under maximum 2.25, and -0 at a bound of 0)",
    "integer-zero": "integer bounds around 0: the engine refuses -0, which is 0",
    "magnitude": "a bound or item count of 2**53 or more: the engine reads it as a 64-bit "
                 "float (2**53 + 1 is 2**53; past 2**63 clamped; below -2**63 it crashes)",
    "ref": "$ref: not established",
    "anyOf-siblings": "anyOf beside other assertions: not established",
    "keyword": "a keyword not established",
}


# The whitelist compares the engine's JSON with JsonSchema's in the spelling "any".
SPELLING_DIFFERS = (
    "the spelling {spelling!r}: the engine's own JSON was compared with JsonSchema's "
    "in the spelling 'any' only"
)


class Difference(NamedTuple):
    """Where (a JSON pointer) and why (a `REASONS` code) the engine's language may differ."""

    where: str
    code: str
    keyword: str = ""

    def __str__(self) -> str:
        extra = f" ({self.keyword!r})" if self.keyword else ""
        return f"{self.where}: {REASONS[self.code]}{extra}"


def engine_difference(schema: Any, where: str = "#") -> Difference | None:
    """None when the engine's language for `schema` equals `JsonSchema`'s (by the
    whitelist above), else the first place where it may not."""
    if where == "#" and isinstance(schema, dict) and _legacy(schema):
        return Difference(where, "keyword", "$schema")
    if schema is True or schema is False:
        return Difference(where, "any-value") if schema else None
    rest = {k: v for k, v in schema.items() if k not in ANNOTATIONS}
    for key in rest:
        if key not in ESTABLISHED:  # a keyword (or an unknown key) not compared
            return Difference(where, "keyword", key)
    if "$ref" in rest:
        return Difference(where, "ref")
    if "anyOf" in rest:
        if len(rest) > 1:
            return Difference(where, "anyOf-siblings")
        for i, branch in enumerate(rest["anyOf"]):
            why = engine_difference(branch, f"{where}/anyOf/{i}")
            if why is not None:
                return why
        return None
    if "enum" in rest or "const" in rest:
        values = list(rest.get("enum", [])) + ([rest["const"]] if "const" in rest else [])
        if not all(v is None or isinstance(v, bool) for v in values):
            return Difference(where, "enum-spelling")
        others = sorted(k for k in rest if k not in ("enum", "const", "type"))
        return Difference(where, "keyword", others[0]) if others else None
    if "type" not in rest:
        return Difference(where, "any-value")
    types = {rest["type"]} if isinstance(rest["type"], str) else set(rest["type"])
    if "string" in types:
        return Difference(where, "strings")
    if "object" in types:
        return Difference(where, "objects")
    return _typed(rest, types, where)


def _typed(rest: dict, types: set, where: str) -> Difference | None:
    for key in rest:
        if key not in ARRAY_KEYWORDS:
            return Difference(where, "keyword", key)
    for key in BOUNDS + COUNTS:
        x = rest.get(key)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and not abs(x) < EXACT_MAGNITUDE:
            return Difference(where, "magnitude", key)
    if any(k in rest for k in BOUNDS) and types & {"integer", "number"}:
        if "number" in types:
            return Difference(where, "number-bounds")
        if _integers_meet_zero(rest):
            return Difference(where, "integer-zero")
    if "array" in types:
        if "items" not in rest:
            return Difference(f"{where}/items", "any-value")
        return engine_difference(rest["items"], f"{where}/items")
    return None


def _legacy(schema: dict) -> bool:
    """Whether the schema's dialect is before draft 6 (its `$ref` and `const` differ)."""
    from jsonschema.validators import validator_for

    return validator_for(schema).__name__ in ("Draft3Validator", "Draft4Validator")


def _integers_meet_zero(schema: dict) -> bool:
    """Whether 0 satisfies the bounds (a boolean `exclusive*` (draft 4) counts as yes)."""
    for key in BOUNDS:
        x = schema.get(key)
        if isinstance(x, bool) or (x is not None and not math.isfinite(x)):
            return True
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    return ((lo is None or lo <= 0) and (hi is None or hi >= 0)
            and (xlo is None or xlo < 0) and (xhi is None or xhi > 0))


__all__ = ["engine_difference", "Difference", "REASONS", "SPELLING_DIFFERS"]
