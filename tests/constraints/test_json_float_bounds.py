"""A float in a schema is read as the decimal the schema's JSON text spells (its
shortest repr, `1e30` is 10**30), on every path: the generic recognizer, the
whole-document check, and the engine grammar (issue 34, finding 4). `jsonschema`
compares Python numbers instead, so it reads the float's binary value
(1e30 = 1000000000000000019884624838656) and differs exactly there."""

import asyncio
import json

import pytest
from jsonschema import Draft202012Validator

from genlm.control import JsonSchema

NEG_INF = float("-inf")
BINARY_1E30 = 1000000000000000019884624838656  # int(1e30)

# (schema, document, accepted under the JSON-text reading)
CASES = [
    ({"type": "integer", "minimum": 1, "maximum": 1e30}, str(10**30), True),
    ({"type": "integer", "minimum": 1, "maximum": 1e30}, str(BINARY_1E30), False),
    ({"type": "integer", "minimum": 1, "maximum": 1e30}, str(10**30 + 1), False),
    ({"type": "integer", "minimum": 1e30}, str(10**30), True),
    ({"type": "integer", "minimum": 1e30}, str(10**30 - 1), False),
    ({"type": "integer", "exclusiveMaximum": 1e30, "minimum": 0}, str(10**30 - 1), True),
    ({"type": "integer", "exclusiveMaximum": 1e30, "minimum": 0}, str(10**30), False),
    ({"type": "number", "maximum": 0.1}, "0.1", True),
    ({"type": "number", "maximum": 0.1}, "0.1000000000000000055511151231257827", False),
    ({"type": "number", "minimum": 0.1}, "0.09999999999999999", False),
    ({"type": "integer", "maximum": -1e30}, str(-(10**30)), True),
    ({"type": "integer", "maximum": -1e30}, str(-BINARY_1E30), True),
    ({"type": "integer", "minimum": -1e30, "maximum": 0}, str(-BINARY_1E30), False),
    ({"enum": [1e30]}, str(10**30), True),
    ({"enum": [1e30]}, str(BINARY_1E30), False),
    ({"const": 0.1}, "0.1000000000000000055511151231257827", False),
    (
        {"type": "integer", "minimum": 9007199254740993.0},
        "9007199254740992",
        True,
    ),  # the float is 2**53
]


@pytest.mark.parametrize("schema, doc, ok", CASES, ids=lambda v: json.dumps(v)[:40])
def test_a_float_bound_is_the_decimal_the_schema_spells(schema, doc, ok):
    got = asyncio.run(JsonSchema(schema).complete(list(doc.encode())))
    assert got == (0.0 if ok else NEG_INF)


@pytest.mark.parametrize("schema, doc, ok", CASES, ids=lambda v: json.dumps(v)[:40])
def test_it_is_the_schema_text_read_as_decimals(schema, doc, ok):
    """The reading equals `jsonschema` on the schema's JSON text parsed with decimals
    (`parse_float=Decimal`): the float 1e30 written in JSON is 10**30."""
    from decimal import Decimal

    text_schema = json.loads(json.dumps(schema), parse_float=Decimal)
    value = json.loads(doc, parse_float=Decimal)
    if "integer" in json.dumps(schema) and not isinstance(value, int):
        pytest.skip("integer spelled with a fraction")
    assert Draft202012Validator(text_schema).is_valid(value) == ok


def test_jsonschema_on_floats_reads_the_binary_value_instead():
    """The documented difference: Python's float 1e30 is 1000000000000000019884624838656."""
    schema = {"type": "integer", "minimum": 1, "maximum": 1e30}
    assert Draft202012Validator(schema).is_valid(BINARY_1E30)
    assert asyncio.run(JsonSchema(schema).complete(list(str(BINARY_1E30).encode()))) == NEG_INF


def test_the_engine_grammar_reads_it_the_same_way():
    """The default coercion (our grammar on the engine) agrees with `engine=False`."""
    pytest.importorskip("llguidance")
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL
    from genlm.control.engine.guided import GuidedCoerced

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
    by_bytes = {bytes(t): t for t in llm.vocab}
    digits = [by_bytes[bytes([c])] for c in b"0123456789-"]
    for schema, doc, ok in CASES:
        if "integer" not in json.dumps(schema):
            continue
        fast = JsonSchema(schema).coerce(llm, f=b"".join)
        slow = JsonSchema(schema).coerce(llm, f=b"".join, engine=False)
        assert isinstance(fast, GuidedCoerced), schema
        ctx = [by_bytes[bytes([c])] for c in doc.encode()]
        assert (
            asyncio.run(fast.complete(ctx))
            == asyncio.run(slow.complete(ctx))
            == (0.0 if ok else NEG_INF)
        )
        for i in range(len(ctx) + 1):
            if asyncio.run(slow.prefix(ctx[:i])) == NEG_INF:
                assert asyncio.run(fast.prefix(ctx[:i])) == NEG_INF
                break
            a, b = asyncio.run(fast.logw_next(ctx[:i])), asyncio.run(slow.logw_next(ctx[:i]))
            assert [a[t] > NEG_INF for t in digits] == [b[t] > NEG_INF for t in digits], (
                schema,
                doc,
                i,
            )
