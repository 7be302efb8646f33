"""Hostile JSON schemas (docs/bad-input.md, "JSON schemas"): each row is a clear
`ValueError`/`TypeError` raised before anything is compiled or retrieved, or a
documented answer; schema handling never opens a socket or a file."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from toys.reliability import undocumented

from genlm.control import JsonSchema

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def nested(n: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(n):
        schema = {"type": "array", "items": schema}
    return schema


MUTUAL = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}

ROWS = [
    # References that leave the document
    ("schema-ref-http", {"enum": [[1]], "items": {"$ref": "http://127.0.0.1:9/x.json"}}, ValueError,
     "'http://127.0.0.1:9/x.json' at #/items does not point inside the schema"),
    ("schema-ref-file", {"enum": [[1]], "items": {"$ref": "file:///etc/hostname"}}, ValueError,
     "does not point inside the schema"),
    ("schema-ref-relative-file", {"$ref": "other.json#/a"}, ValueError, "does not point inside"),
    ("schema-ref-other-id", {"$id": "https://ex.com/s.json", "$ref": "t.json"}, ValueError,
     "does not point inside"),
    ("schema-ref-nested-id", {"$defs": {"a": {"$id": "https://ex.com/a.json", "type": "null"}},
                              "$ref": "#/$defs/a"}, ValueError, "nested \\$id"),
    ("schema-ref-in-unknown-keyword", {"not": {"$ref": "http://x/y"}}, ValueError, "does not point inside"),
    # Sizes and depth
    ("schema-nested-150", nested(150), ValueError, "nested deeper than 64 levels"),
    ("schema-enum-100001", {"enum": list(range(100_001))}, ValueError, "more than 100000 values"),
    ("schema-enum-numbers-2001", {"enum": list(range(2001))}, ValueError,
     "2001 numbers, more than MAX_ENUM_NUMBERS = 2000"),
    ("schema-anyof-10001", {"anyOf": [{"const": i} for i in range(10_001)]}, ValueError,
     "more than 10000 subschemas"),
    ("schema-long-string", {"const": "x" * 1_000_001}, ValueError, "more than 1000000 characters"),
    ("schema-huge-int", {"maximum": 10**2000}, ValueError, "more than 1000 digits"),
    # Patterns
    ("schema-pattern-nested", {"type": "string", "pattern": "(?:" * 3000 + "a" + ")" * 3000},
     ValueError, "pattern is nested too deeply"),
    ("schema-pattern-repeat-overflow", {"type": "string", "pattern": "a{99999999999}"}, ValueError,
     "pattern is too large to compile.*repetition number"),
    # Reference cycles
    ("schema-ref-self", {"$ref": "#"}, ValueError, "accepts no document"),
    ("schema-ref-mutual", MUTUAL, ValueError, "accepts no document"),
    ("schema-ref-self-with-sibling", {"$ref": "#", "type": "object"}, ValueError,
     "refers back to itself"),
    ("schema-ref-cycle-through-anyof", {"anyOf": [{"$ref": "#"}], "type": "object"}, ValueError,
     "refers back to itself"),
    # Values that are not JSON
    ("schema-key-int", {"properties": {1: {}}}, TypeError, "key 1 at #/properties is a int"),
    ("schema-const-key-int", {"const": {1: 2}}, TypeError, "key 1 at #/const"),
    ("schema-tuple", {"enum": (1, 2)}, TypeError, "tuple, which is not JSON"),
    ("schema-set", {"enum": {1, 2}}, TypeError, "set, which is not JSON"),
    ("schema-enum-nan", {"enum": [float("nan")]}, ValueError, "nan at #/enum/0 is not finite"),
    ("schema-const-inf", {"const": float("inf")}, ValueError, "not finite"),
    ("schema-minimum-nan", {"type": "number", "minimum": float("nan")}, ValueError,
     "nan at #/minimum is not finite"),
    ("schema-max-length-inf", {"type": "string", "maxLength": float("-inf")}, ValueError,
     "not finite"),
    ("schema-false", False, ValueError, "accepts no document"),
]


@pytest.mark.parametrize("schema, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_hostile_schema_gives_a_clear_error(schema, err, match):
    with pytest.raises(err, match=match):
        JsonSchema(schema)


def test_every_row_is_documented():
    missing = undocumented(r[0] for r in ROWS + VALUE_ROWS + ENGINE_ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"


# Rows whose answer is a value: (row, schema, a valid document, an invalid one) ---------

VALUE_ROWS = [
    ("schema-true", True, b'{"a":["/",1e5]}', b"{"),
    ("schema-nested-30", nested(30), b"[" * 30 + b"7" + b"]" * 30, b"[" * 29 + b"7" + b"]" * 29),
    ("schema-min-length-huge", {"type": "string", "minLength": 10**9}, None, b'"abc"'),
    ("schema-min-length-huge-pattern", {"type": "string", "minLength": 10**9, "pattern": "^(ab)+$"},
     None, b'"ab"'),
    ("schema-max-items-huge", {"type": "array", "maxItems": 10**12, "items": {"type": "null"}},
     b"[null,null]", b"[null,"),
    ("schema-enum-strings-99990", {"enum": [str(i) for i in range(99_990)]}, b'"99989"', b'"99990"'),
    ("schema-enum-numbers-2000", {"enum": list(range(2000))}, b"1999", b"2000"),
    ("schema-anyof-999", {"anyOf": [{"const": i} for i in range(999)]}, b"998", b"999"),
    # Patterns beyond the byte automaton: read as any string on prefixes, checked on documents
    ("schema-pattern-repeat-5000", {"type": "string", "pattern": "^a{5000}$"},
     b'"' + b"a" * 5000 + b'"', b'"aa"'),
    ("schema-pattern-literal-20000", {"type": "string", "pattern": "x" * 20000},
     b'"' + b"x" * 20000 + b'"', b'"xx"'),
    ("schema-pattern-dot-repeat", {"type": "string", "pattern": "^.{2000}$"},
     b'"' + b"b" * 2000 + b'"', b'"ab"'),
    ("schema-pattern-lookahead", {"type": "string", "pattern": "^(?=a)a$"}, b'"a"', b'"b"'),
    ("schema-ref-in-const-data", {"const": {"$ref": "http://127.0.0.1:9/x.json"}},
     b'{"$ref":"http://127.0.0.1:9/x.json"}', b'{"$ref":"x"}'),
    ("schema-ref-id-relative", {"$id": "https://ex.com/s.json", "$defs": {"n": {"type": "null"}},
                                "$ref": "s.json#/$defs/n"}, b"null", b"nul"),
    ("schema-number-huge-exponent", {"type": "number", "maximum": 1}, b"1e-99999999999999999999999",
     b"1e99999999999999999999999"),
    ("schema-multiple-of-huge-exponent", {"multipleOf": 0.5}, b"5E+1000000", b"1e-1000000"),
    ("schema-multiple-of-long-integer", {"type": "integer", "multipleOf": 3}, b"1" * 6000,
     b"1" * 5999 + b"2"),
]


@pytest.mark.parametrize("schema, good, bad", [r[1:] for r in VALUE_ROWS], ids=[r[0] for r in VALUE_ROWS])
async def test_hostile_schema_with_an_answer(schema, good, bad):
    p = JsonSchema(schema)
    if good is not None:
        assert await p.complete(list(good)) == 0.0
    assert await p.complete(list(bad)) == float("-inf")
    assert await p.prefix(list(bad[:2])) == 0.0  # a live prefix of both, so the limit is in the length


def test_huge_min_length_keeps_strings_open():
    p = JsonSchema({"type": "string", "minLength": 10**9, "pattern": "^(ab)+$"})
    row = p._row(list(b'"abab'))
    assert row[ord('"')] == float("-inf")  # closing now would be too short
    assert row[ord("a")] == 0.0 and row[ord("b")] == float("-inf")


# No network, no file: an audit hook in a subprocess ---------------------------------------

AUDIT = textwrap.dedent(
    """
    import asyncio, json, sys
    ARMED, SEEN = [False], []

    def hook(event, args):
        if ARMED[0] and event in ("socket.connect", "urllib.Request", "open"):
            SEEN.append([event, repr(args)[:120]])
            raise RuntimeError(f"schema handling touched {event}")

    sys.addaudithook(hook)
    from genlm.control import AWRS, JsonSchema, PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")
    SAFE = [{"type": "array", "items": {"type": "integer"}},
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}},
             "required": ["a"]},
            {"$defs": {"n": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}]}},
             "$ref": "#/$defs/n"}]
    HOSTILE = [{"enum": [[1]], "items": {"$ref": "http://127.0.0.1:9/x.json"}},
               {"enum": [[1]], "items": {"$ref": "file:///etc/hostname"}},
               {"$ref": "other.json"}, {"$id": "http://127.0.0.1:9/", "$ref": "x.json"}]

    async def run(schemas):
        for schema in schemas:
            p = JsonSchema(schema)
            for engine in (None, True, False):
                c = p.coerce(llm, f=b"".join, engine=engine)
                await c.logw_next([])
            await AWRS(llm, p.coerce(llm, f=b"".join)).smc(2, 0.5, 4, seed=0)

    asyncio.run(run(SAFE))  # warm up: every import and lazy table loads here
    ARMED[0] = True
    asyncio.run(run(SAFE))
    errors = []
    for schema in HOSTILE:
        try:
            JsonSchema(schema)
            errors.append("accepted")
        except ValueError as e:
            errors.append(str(e))
    ARMED[0] = False
    print(json.dumps({"seen": SEEN, "errors": errors}))
    """
)


def test_schema_handling_never_touches_network_or_files():
    out = subprocess.run([sys.executable, "-c", AUDIT], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["seen"] == []
    assert len(result["errors"]) == 4
    assert all("does not point inside the schema" in e for e in result["errors"]), result["errors"]


# The engine's own entry point checks the schema the same way ---------------------------

ENGINE_ROWS = [
    ("constrain-schema-key-int", {"properties": {1: {}}}, TypeError, "key 1 at #/properties"),
    ("constrain-schema-nan", {"enum": [float("nan")]}, ValueError, "not finite"),
    ("constrain-schema-ref-http", {"$ref": "http://127.0.0.1:9/x.json"}, ValueError,
     "does not point inside the schema"),
    # (crash-prone bounds below -2**63 are tried in a subprocess: test_json_engine_magnitude.py)
    ("constrain-schema-bound-past-64-bits", {"type": "integer", "minimum": 2**64, "maximum": 2**65},
     ValueError, "'minimum' = 18446744073709551616 at # is outside the 64-bit integers"),
]


@pytest.fixture(scope="module")
def mock_llm():
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")


@pytest.mark.parametrize("schema, err, match", [r[1:] for r in ENGINE_ROWS], ids=[r[0] for r in ENGINE_ROWS])
def test_llm_constrain_checks_the_schema(mock_llm, schema, err, match):
    with pytest.raises(err, match=match):
        mock_llm.constrain(json_schema=schema)
