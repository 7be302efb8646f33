"""The intersection of two schema objects as one, exactly where it can be, else a superset.

`merge(a, b, inexact)` returns a schema object `m` with `L(m) ⊇ L(a) ∩ L(b)`; where
it cannot be sure of equality it adds the keyword to `inexact`, and the caller then
checks whole documents against the original schema (see `_json_residual`).

Exact: keywords on one side only, or equal on both; `type` (intersection),
`required` (union), `allOf` (both lists), lower bounds (the larger), upper bounds (the smaller), `enum`
(the common values), `properties` (shared names get `allOf` of both), within the
object group below when only one side has `additionalProperties`-like keywords.

Keywords whose meaning depends on siblings come in groups: properties
(`properties`, `patternProperties`, `additionalProperties`,
`unevaluatedProperties`), items (`items`, `prefixItems`, `additionalItems`,
`unevaluatedItems`), `if`/`then`/`else`, `contains`/`minContains`/`maxContains`.
When both sides hold keywords of the items, conditional or contains group (or, with
draft 4's Boolean `exclusiveMinimum`, a bound and its flag), `a`'s group is kept
and `b`'s dropped (a superset). In the properties group both sides'
`properties` and `patternProperties` are united and `additionalProperties` becomes
`allOf` of both (a superset when one side's extra keys are the other's declared ones).
"""

from __future__ import annotations

from typing import Any

LOWER = ("minLength", "minItems", "minProperties", "minContains")
UPPER = ("maxLength", "maxItems", "maxProperties", "maxContains")
PROPERTY_GROUP = ("properties", "patternProperties", "additionalProperties",
                  "unevaluatedProperties")
DROP_GROUPS = (("items", "prefixItems", "additionalItems", "unevaluatedItems"),
               ("if", "then", "else"), ("contains", "minContains", "maxContains"))
LEGACY_BOUNDS = (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum"))


def json_equal(a: Any, b: Any) -> bool:
    from jsonschema._utils import equal

    return bool(equal(a, b))


def _both(a: dict, b: dict) -> dict:
    return {"allOf": [a, b]}


def merge(a: dict, b: dict, inexact: set) -> dict:
    """A schema object for `a ∧ b` (a superset where `inexact` gains a keyword)."""
    b = dict(b)
    groups = DROP_GROUPS + (LEGACY_BOUNDS if _legacy_exclusive(a, b) else ())
    for group in groups:
        if any(k in a for k in group) and any(k in b for k in group):
            if any(not json_equal(a.get(k), b.get(k)) for k in group):
                inexact.add(group[0])
            for k in group:
                b.pop(k, None)
    if any(k in a for k in PROPERTY_GROUP) and any(k in b for k in PROPERTY_GROUP):
        _object_group(a, b, inexact)
    out = dict(a)
    for k, v in b.items():
        if k not in out or json_equal(out[k], v):
            out[k] = v
        else:
            out[k] = _combine(k, out[k], v, a, b, inexact)
    return out


def _object_group(a: dict, b: dict, inexact: set) -> None:
    """Move the properties group of `b` into a form `merge` combines key by key."""
    extra_a = any(k in a for k in PROPERTY_GROUP[1:])
    extra_b = any(k in b for k in PROPERTY_GROUP[1:])
    same = all(json_equal(a.get(k), b.get(k)) for k in PROPERTY_GROUP)
    if not same and (extra_a or extra_b) and ("properties" in a or "properties" in b
                                              or "patternProperties" in a
                                              or "patternProperties" in b):
        inexact.add("additionalProperties")
    if "unevaluatedProperties" in b and not same:
        inexact.add("unevaluatedProperties")
        b.pop("unevaluatedProperties")


def _combine(k: str, x: Any, y: Any, a: dict, b: dict, inexact: set) -> Any:
    if k == "type":
        xs = [x] if isinstance(x, str) else list(x)
        ys = [y] if isinstance(y, str) else list(y)
        if "number" in xs and "integer" in ys:
            xs.append("integer")
        if "number" in ys and "integer" in xs:
            ys.append("integer")
        return [t for t in dict.fromkeys(xs) if t in ys]
    if k == "allOf":
        return list(x) + list(y)
    if k == "required":
        return list(dict.fromkeys(list(x) + list(y)))
    if k == "enum":
        return [v for v in x if any(json_equal(v, w) for w in y)]
    if k in ("properties", "patternProperties"):
        out = dict(x)
        for name, s in y.items():
            out[name] = s if name not in out or json_equal(out[name], s) else _both(out[name], s)
        return out
    if k == "additionalProperties":
        return _both(x, y)
    if k in LOWER or k == "minimum":
        return max(x, y)
    if k in UPPER or k == "maximum":
        return min(x, y)
    if k == "exclusiveMinimum" and not isinstance(x, bool) and not isinstance(y, bool):
        return max(x, y)
    if k == "exclusiveMaximum" and not isinstance(x, bool) and not isinstance(y, bool):
        return min(x, y)
    inexact.add(k)
    return x


def _legacy_exclusive(a: dict, b: dict) -> bool:
    """Whether draft 4's Boolean `exclusiveMinimum`/`exclusiveMaximum` is present."""
    return any(isinstance(s.get(k), bool) for s in (a, b)
               for k in ("exclusiveMinimum", "exclusiveMaximum"))


__all__ = ["merge", "json_equal"]
