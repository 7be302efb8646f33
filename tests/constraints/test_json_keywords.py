"""Real-world JSON Schema keywords: `JsonSchema` pinned to `jsonschema` on generated documents.

The reference is `json.loads` + `jsonschema` under the documented readings (exact
decimals, integers spelled as integers, ASCII pattern classes, `multipleOf` as an
exact rational quotient, the checked formats of `_json_format`). Every valid
document must have every prefix live (the prefix check never rejects a viable
prefix); where the schema reads no keyword as a superset, every live prefix has a
valid completion.
"""

import json
import random
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import ValidationError
from jsonschema.validators import extend, validator_for
from toys.json_engine import random_completion

from genlm.control import JsonSchema
from genlm.control.constraints.json_schema._json_format import format_checker
from genlm.control.engine._json_exact import engine_difference
from genlm.control.potential.coerce import Coerced

NEG_INF = float("-inf")
D7 = "http://json-schema.org/draft-07/schema#"
D4 = "http://json-schema.org/draft-04/schema#"

SCHEMAS = {
    "format": {"type": "object", "properties": {
        "d": {"type": "string", "format": "date"}, "t": {"format": "date-time"},
        "ip": {"type": "string", "format": "ipv4"}, "u": {"format": "uuid", "maxLength": 40},
        "h": {"type": "string", "format": "hostname", "pattern": "^[a-c.]+$"},
        "x": {"type": "string", "format": "int32"}}},
    "oneOf-disjoint": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "integer"},
                                 {"type": "array", "items": {"type": "null"}}]},
    "oneOf-overlap": {"oneOf": [{"type": "integer", "minimum": 3}, {"type": "integer", "maximum": 5}]},
    "allOf": {"allOf": [{"$ref": "#/$defs/base"},
                        {"properties": {"b": {"type": "integer", "minimum": 0}}, "required": ["b"]}],
              "$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"},
                                                                  "b": {"maximum": 9}},
                                 "required": ["a"]}}},
    "allOf-additional": {"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                                   {"properties": {"b": {}}}]},
    "multipleOf": {"type": "array", "items": {"type": "number", "multipleOf": 0.5, "maximum": 20}},
    "prefixItems": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                    "items": {"type": "boolean"}, "minItems": 1},
    "items-array-d7": {"$schema": D7, "type": "array", "items": [{"type": "null"}, {"type": "integer"}],
                       "additionalItems": False},
    "uniqueItems": {"type": "array", "items": {"enum": [1, 2, 1.0, "a", [1]]}, "uniqueItems": True},
    "not": {"not": {"type": "string"}, "type": ["string", "integer", "null"]},
    "properties-count": {"type": "object", "minProperties": 1, "maxProperties": 2,
                         "additionalProperties": {"type": "integer"}},
    "patternProperties": {"type": "object", "patternProperties": {"^x": {"type": "integer"},
                                                                  "y$": {"type": "string"}},
                          "properties": {"xa": {"minimum": 2}}, "additionalProperties": False},
    "if-then-else": {"type": "object", "if": {"properties": {"k": {"const": "n"}}},
                     "then": {"properties": {"v": {"type": "integer"}}},
                     "else": {"properties": {"v": {"type": "string"}}}},
    "contains": {"type": "array", "contains": {"type": "integer"}, "minContains": 1, "maxContains": 2},
    "dependentRequired": {"type": "object", "dependentRequired": {"a": ["b"]}},
    "propertyNames": {"type": "object", "propertyNames": {"maxLength": 1}},
    "unevaluatedProperties": {"type": "object", "allOf": [{"properties": {"a": {}}}],
                              "unevaluatedProperties": False},
    "draft4": {"$schema": D4, "id": "http://ex.com/s.json", "type": "object",
               "definitions": {"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}},
               "properties": {"n": {"$ref": "#/definitions/n", "maximum": 0}, "c": {"const": 1}}},
    "ref-siblings-d7": {"$schema": D7, "definitions": {"s": {"type": "string"}},
                        "items": {"$ref": "#/definitions/s", "maxLength": 1}, "type": "array"},
    "unknown-keys": {"type": "object", "self": {"vendor": "com.x", "name": "e"},
                     "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"a": {"type": "integer", "x-order": 1, "nullable": True}}},
}


def _multiple_of(validator, d, instance, schema):
    if validator.is_type(instance, "number"):
        if (Fraction(Decimal(instance)) / Fraction(Decimal(d))).denominator != 1:
            yield ValidationError("not a multiple")


def _ascii_pattern(validator, pattern, instance, schema):
    import re

    if isinstance(instance, str) and not re.search(pattern, instance, re.ASCII):
        yield ValidationError("no match")


def reference_valid(schema, doc: bytes) -> bool:
    try:
        value = json.loads(doc.decode("utf-8"), parse_float=Decimal,
                           parse_constant=lambda c: 1 / 0)
    except (ValueError, ZeroDivisionError):
        return False
    base = validator_for(schema)
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda c, x: isinstance(x, int) and not isinstance(x, bool))
    cls = extend(base, {"pattern": _ascii_pattern, "multipleOf": _multiple_of}, type_checker=checker)
    exact = json.loads(json.dumps(schema), parse_float=Decimal)
    return cls(exact, format_checker=format_checker()).is_valid(value)


KEYS = st.sampled_from(["a", "b", "k", "v", "n", "c", "d", "t", "ip", "u", "h", "x", "xa", "xb", "zy", "q"])
STRINGS = st.sampled_from(["", "a", "ab", "abc", "n", "2024-02-29", "2023-02-29", "2024-13-01",
                           "2020-01-31T23:59:60.5Z", "2020-01-31t10:00:00+05:30", "10.0.0.255",
                           "10.0.0.256", "01.2.3.4", "123e4567-e89b-12d3-a456-426614174000",
                           "a.b", "a..b", "c-", "ab.c", "é", "y", "-1"])
SCALARS = (st.none() | st.booleans() | st.integers(-3, 12) | STRINGS
           | st.sampled_from([0.5, 1.5, 2.0, -3.25, 1e1, 7.25]))
VALUES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(KEYS, c, max_size=3),
                      max_leaves=8)

_POTENTIALS: dict = {}


def potential(name) -> JsonSchema:
    if name not in _POTENTIALS:
        _POTENTIALS[name] = JsonSchema(SCHEMAS[name], spelling="any")
    return _POTENTIALS[name]


async def completion(p: JsonSchema, ctx: list, rng: random.Random, steps: int = 200):
    """A random completion of `ctx` drawn among the bytes `p` allows (None if not found)."""
    return await random_completion(p, ctx, rng, steps, close_bias=0.6)


def test_every_schema_builds_and_says_which_keywords_are_loose():
    loose = {name: potential(name).superset_keywords for name in SCHEMAS}
    assert loose["format"] == frozenset() and loose["oneOf-disjoint"] == frozenset()
    assert loose["prefixItems"] == loose["items-array-d7"] == loose["draft4"] == frozenset()
    assert loose["allOf"] == frozenset() and loose["unknown-keys"] == frozenset()
    assert loose["oneOf-overlap"] == {"oneOf"} and loose["uniqueItems"] == {"uniqueItems"}
    assert loose["allOf-additional"] == {"additionalProperties"}
    for name in SCHEMAS:
        assert (potential(name).document_check is None) == (not loose[name])


@pytest.mark.parametrize("name", list(SCHEMAS))
@settings(max_examples=60, deadline=None)
@given(value=VALUES, compact=st.booleans())
async def test_agrees_with_jsonschema(name, value, compact):
    p, schema = potential(name), SCHEMAS[name]
    doc = json.dumps(value, separators=(",", ":") if compact else (", ", ": ")).encode()
    want = reference_valid(schema, doc)
    assert (await p.complete(list(doc)) == 0.0) == want, doc
    if want:
        for i in range(len(doc) + 1):
            assert await p.prefix(list(doc[:i])) == 0.0, (doc, i)
    elif not p.superset_keywords and await p.prefix(list(doc)) == 0.0:
        witness = await completion(p, list(doc), random.Random(len(doc)))
        if witness is not None:
            assert reference_valid(schema, witness), (doc, witness)


@pytest.mark.parametrize("name", [n for n in SCHEMAS if not JsonSchema(SCHEMAS[n], spelling="any").superset_keywords])
@settings(max_examples=40, deadline=None)
@given(data=st.text('{}[]",:0-19.e abnul"\\dxyzT', max_size=16).map(str.encode))
async def test_exact_prefix_has_a_valid_completion(name, data):
    p, schema = potential(name), SCHEMAS[name]
    assert (await p.complete(list(data)) == 0.0) == reference_valid(schema, data)
    if await p.prefix(list(data)) == 0.0:
        witness = await completion(p, list(data), random.Random(len(data)))
        if witness is not None:
            assert reference_valid(schema, witness), (data, witness)


@pytest.mark.parametrize(
    "name, doc, valid",
    [
        ("format", b'{"d": "2024-02-29"}', True),
        ("format", b'{"d": "2023-02-29"}', False),
        ("format", b'{"d": "0000-01-01"}', False),
        ("format", b'{"t": "2020-01-31t10:00:60.25+05:30"}', True),
        ("format", b'{"t": "2020-01-31 10:00:00Z"}', False),
        ("format", b'{"ip": "255.255.255.255"}', True),
        ("format", b'{"ip": "1.2.3.04"}', False),
        ("format", b'{"h": "ab.c"}', True),
        ("format", b'{"h": "a..b"}', False),
        ("format", b'{"x": "not an int"}', True),  # an annotation
        ("multipleOf", b"[0.5, 1e1, 2.50, 195e-1]", True),
        ("multipleOf", b"[0.25]", False),
        ("uniqueItems", b"[1, 2, [1]]", True),
        ("uniqueItems", b"[1, 1.0]", False),
        ("not", b"3", True),
        ("not", b'"a"', False),
        ("items-array-d7", b"[null, 3]", True),
        ("items-array-d7", b"[null, 3, 4]", False),
        ("draft4", b'{"n": 0}', False),  # exclusiveMinimum: true
        ("draft4", b'{"n": 1, "c": 2}', True),  # const is not a draft-4 keyword; $ref hides maximum
        ("ref-siblings-d7", b'["abc"]', True),  # draft 7: $ref hides maxLength
        ("unevaluatedProperties", b'{"a": 1}', True),
        ("unevaluatedProperties", b'{"a": 1, "b": 2}', False),
    ],
)
async def test_documented_readings(name, doc, valid):
    p = potential(name)
    assert (await p.complete(list(doc)) == 0.0) == valid
    assert reference_valid(SCHEMAS[name], doc) == valid


async def test_exact_keywords_prune_dead_prefixes_at_once():
    date = potential("format")
    assert await date.prefix(list(b'{"d": "2023-02-2')) == 0.0
    assert await date.prefix(list(b'{"d": "2023-02-3')) == NEG_INF
    assert await date.prefix(list(b'{"ip": "256')) == NEG_INF
    tup = potential("items-array-d7")
    assert await tup.prefix(list(b"[null, 3,")) == NEG_INF
    assert await potential("prefixItems").prefix(list(b'[1, "a", 3')) == NEG_INF


async def test_superset_prefix_is_documented_and_complete_stays_exact():
    p = potential("uniqueItems")
    assert await p.prefix(list(b"[1, 1")) == 0.0  # live on prefixes (no completion is valid)
    assert await p.complete(list(b"[1, 1]")) == NEG_INF
    row = (await p.logw_next(list(b"[1, 1]"))).weights
    assert row[-1] == NEG_INF
    assert (await p.logw_next(list(b"[1, 2]"))).weights[-1] == 0.0


async def test_carried_states_check_the_document_at_eos():
    p = potential("uniqueItems")
    for doc in (b"[1,1]", b"[1,2]", b'["a"]'):
        state = p.state_of([])
        for i, b in enumerate(doc):
            assert np.array_equal(p.logw_next_of(state), (await p.logw_next(list(doc[:i]))).weights)
            state = p.advance(state, b)
        assert np.array_equal(p.logw_next_of(state), (await p.logw_next(list(doc))).weights)


async def test_coerced_rows_check_the_document_at_eos():
    vocab = [b"[", b"]", b"1", b"2", b",", b"1,", b"[1", b'"a"']
    p = potential("uniqueItems").spawn()
    fast = p.coerce(vocab, f=b"".join)
    slow = Coerced(p, vocab, b"".join)
    assert type(fast).__name__ == "CoercedJson"
    for ctx, eos in (([b"[1", b",", b"2", b"]"], 0.0), ([b"[", b"1,", b"1", b"]"], NEG_INF),
                     ([b"[", b'"a"', b",", b"1", b"]"], 0.0)):
        row = (await fast.logw_next(ctx)).weights
        assert row[-1] == eos and await fast.complete(ctx) == eos
        np.testing.assert_array_equal(row, (await slow.logw_next(ctx)).weights)
        np.testing.assert_array_equal(row, (await fast.batch_logw_next([ctx]))[0].weights)


def test_engine_is_refused_for_every_keyword_it_was_not_compared_on():
    for name, schema in SCHEMAS.items():
        assert engine_difference(schema) is not None, name
    assert engine_difference({"type": "integer", "x-foo": 1}).keyword == "x-foo"
    assert engine_difference({"$schema": D4, "type": "boolean", "const": True}) is not None


@pytest.mark.parametrize(
    "schema, match",
    [
        ({"$ref": "https://ex.com/other.json"}, "does not point inside the schema"),
        ({"allOf": [{"$ref": "#"}]}, "refers back to itself"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
          "$ref": "#/$defs/a", "type": "object"}, "refers back to itself"),
    ],
)
def test_bad_references_are_clear_errors(schema, match):
    with pytest.raises(ValueError, match=match):
        JsonSchema(schema, spelling="any")


def _doubling(n):
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(n)}
    defs[f"d{n}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0", "minimum": 0}


async def test_compile_cost_is_bounded_for_hostile_combinations():
    with pytest.raises(ValueError, match="inlines more than"):
        JsonSchema(_doubling(30), spelling="any")  # 2**30 inlined copies without the limit
    deep = {"type": "integer"}
    for _ in range(30):  # 60 levels of dicts and lists: under MAX_DEPTH
        deep = {"allOf": [deep, {"minimum": 0}]}
    p = JsonSchema(deep, spelling="any")
    assert await p.complete(list(b"3")) == 0.0 and await p.complete(list(b"-1")) == NEG_INF
    tree = {"$defs": {"t": {"allOf": [{"type": "object"}, {"properties": {"k": {"$ref": "#/$defs/t"}}}]}},
            "$ref": "#/$defs/t", "type": "object", "maxProperties": 3}
    p = JsonSchema(tree, spelling="any")
    assert await p.complete(list(b'{"k": {"k": {}}}')) == 0.0
    assert await p.complete(list(b'{"k": {"k": 1}}')) == NEG_INF


@pytest.mark.parametrize("pattern", ["^dev|alpha|stable$", "^$|(^(?:a+\\s)?b$)", "[|(]x|(y|z)$"])
@settings(max_examples=60, deadline=None)
@given(text=st.text("devalphstb (|)xyz\n", max_size=9))
async def test_top_level_alternatives_keep_their_anchors(pattern, text):
    import re

    p = JsonSchema({"type": "string", "pattern": pattern}, spelling="any")
    assert not p.superset_keywords
    doc = json.dumps(text).encode()
    assert (await p.complete(list(doc)) == 0.0) == bool(re.search(pattern, text, re.ASCII))
