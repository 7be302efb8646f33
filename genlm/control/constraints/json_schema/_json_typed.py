"""The typed alternatives of one schema object: `Lit`, `Num`, `Str`, `Obj`, `Arr`.

`typed_alts(compiler, keys, where)` reads the keywords of one schema object that
constrain a single value of each type. Read exactly: `type`, bounds, lengths,
`pattern`, the checked formats (`_json_format`), `properties`, `required`,
`additionalProperties`, `items` (one schema or, before 2020-12, a list with
`additionalItems`), `prefixItems`, `minItems`, `maxItems`. Read as a superset
(the keyword is added to `compiler.inexact`, and whole documents are checked):

- `patternProperties`: a key outside `properties` takes a value of its
  `additionalProperties` or of any pattern's schema;
- a `pattern` the byte automaton does not express (lookarounds, anchors inside,
  beyond `MAX_PATTERN_SIZE`): any string;
- a `format` checked on whole documents only (`idn-hostname`, `regex`): any string;
- `multipleOf`, `uniqueItems`, `contains`, `minProperties`, `maxProperties`,
  `propertyNames`, `dependentRequired`, `dependentSchemas`, `dependencies`,
  `unevaluatedProperties`, `unevaluatedItems`: not read on prefixes.
"""

from __future__ import annotations

from decimal import Decimal

from genlm.control.constraints.json_schema._json_format import (
    MAX_LENGTH,
    format_pattern,
    has_document_format,
    has_format,
)
from genlm.control.constraints.json_schema._json_nodes import (
    Arr,
    Lit,
    Num,
    Obj,
    Str,
    decimal,
)
from genlm.control.constraints.json_schema._json_number import Bounds
from genlm.control.constraints.json_schema._json_string import Pattern

TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
# Keywords read as a superset, with the values for which they constrain nothing.
LOOSE = {"multipleOf": (), "uniqueItems": (False,), "contains": (), "minProperties": (0,),
         "maxProperties": (), "propertyNames": (True, {}), "dependentRequired": ({},),
         "dependentSchemas": ({},), "dependencies": ({},), "unevaluatedProperties": (True, {}),
         "unevaluatedItems": (True, {})}


def typed_alts(compiler, keys: dict, where: str) -> list:
    """The alternatives of a schema object without `$ref`, `allOf`, `anyOf`, `oneOf`,
    `if`, `enum` or `const` (those are read by the compiler)."""
    for k, trivial in LOOSE.items():
        if k in keys and not any(keys[k] == t and type(keys[k]) is type(t) for t in trivial):
            compiler.inexact.add(k)
    types = keys.get("type", TYPES)
    types = [types] if isinstance(types, str) else list(types)
    alts: list = []
    if "null" in types:
        alts.append(Lit(b"null"))
    if "boolean" in types:
        alts += [Lit(b"true"), Lit(b"false")]
    if "number" in types or "integer" in types:
        alts.append(Num("number" not in types, bounds(keys, where)))
    if "string" in types:
        alts.append(string_alt(compiler, keys, where))
    if "object" in types:
        alts.append(object_alt(compiler, keys, where))
    if "array" in types:
        alts.append(array_alt(compiler, keys, where))
    return alts


def string_alt(compiler, keys: dict, where: str) -> Str:
    """A `Str`; a `pattern` beyond the automaton (too large, a lookaround, an anchor
    inside) is read as a superset (any string) and checked on the document."""
    pattern = keys.get("pattern")
    if pattern is not None:
        try:
            pattern = Pattern.compile(pattern, where)
        except ValueError:
            compiler.inexact.add("pattern")
            pattern = None
    fmt = has_format(keys.get("format"))
    if has_document_format(keys.get("format")):
        compiler.inexact.add("format")
    max_len = keys.get("maxLength")
    if fmt is not None:
        checked = format_pattern(fmt)
        try:
            pattern = checked if pattern is None else pattern.intersect(checked)
        except ValueError:
            compiler.inexact.add("pattern")
            pattern = checked
        cap = MAX_LENGTH.get(fmt)
        if cap is not None:
            max_len = cap if max_len is None else min(max_len, cap)
    return Str(keys.get("minLength", 0), max_len, pattern)


def object_alt(compiler, keys: dict, where: str) -> Obj:
    props = {k: compiler.child(v, f"{where}/properties/{k}")
             for k, v in keys.get("properties", {}).items()}
    extra = keys.get("additionalProperties", True)
    additional = None if extra is False else compiler.child(extra, f"{where}/additionalProperties")
    patterns = keys.get("patternProperties", {})
    if patterns:
        compiler.inexact.add("patternProperties")
        members = [compiler.child(s, f"{where}/patternProperties/{p}") for p, s in patterns.items()]
        additional = compiler.union(members + ([additional] if additional is not None else []))
    required = keys.get("required", ())
    return Obj(props, frozenset(required if isinstance(required, list) else ()), additional)


def array_alt(compiler, keys: dict, where: str) -> Arr:
    if compiler.prefix_items:
        head, rest, name = keys.get("prefixItems", []), keys.get("items", True), "items"
    else:
        items = keys.get("items", True)
        if isinstance(items, list):
            head, rest, name = items, keys.get("additionalItems", True), "additionalItems"
        else:
            head, rest, name = [], items, "items"
    fixed = tuple(compiler.child(s, f"{where}/prefixItems/{i}") for i, s in enumerate(head))
    tail = None if rest is False else compiler.child(rest, f"{where}/{name}")
    return Arr(tail, keys.get("minItems", 0), keys.get("maxItems"), fixed)


def bounds(schema: dict, where: str) -> Bounds:
    """The interval of `minimum`, `maximum` and the exclusive bounds (draft 4's flags too)."""
    lo: Decimal | None = None
    hi: Decimal | None = None
    lo_incl = hi_incl = True
    if "minimum" in schema:
        lo = decimal(schema["minimum"], "minimum", where)
    if "maximum" in schema:
        hi = decimal(schema["maximum"], "maximum", where)
    x = schema.get("exclusiveMinimum")
    if isinstance(x, bool):  # draft 4: a flag on minimum
        lo_incl = not x
    elif x is not None:
        d = decimal(x, "exclusiveMinimum", where)
        if lo is None or d >= lo:
            lo, lo_incl = d, False
    x = schema.get("exclusiveMaximum")
    if isinstance(x, bool):
        hi_incl = not x
    elif x is not None:
        d = decimal(x, "exclusiveMaximum", where)
        if hi is None or d <= hi:
            hi, hi_incl = d, False
    return Bounds(lo, lo_incl, hi, hi_incl)


__all__ = ["typed_alts", "bounds", "TYPES", "LOOSE"]
