import json
import random
import re
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import ValidationError
from jsonschema.validators import extend, validator_for
from toys.constraints import embedded_tokenizer, embedded_vocab
from toys.json_engine import mutate, random_completion

from genlm.control import EOS, JsonSchema
from genlm.control.potential.coerce import Coerced
from genlm.control.testing import check_potential

NEG_INF = float("-inf")

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}

# One schema per keyword group; together they cover every supported keyword.
SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 3},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "array": {
        "type": "array",
        "items": {"type": "number", "exclusiveMinimum": -2, "exclusiveMaximum": 10.5},
        "minItems": 1,
        "maxItems": 3,
    },
    "enum": {"enum": ["red", "é", 1, None, True, [1, "a"], {"k": 2.5}]},
    "const": {"const": {"a": [1, False]}},
    "anyOf": {
        "anyOf": [
            {"type": "string", "pattern": "^[a-c]+$"},
            {"type": "integer", "minimum": 10},
            {"type": "null"},
        ]
    },
    "ref": TREE,
    "string": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "b[0-9]"},
    "types": {"type": ["number", "boolean"], "minimum": -1.5, "maximum": 1e3},
    "any": {},
    "additional": {
        "type": "object",
        "properties": {"id": {"type": "string", "enum": ["x", "é"]}},
        "additionalProperties": {"type": "boolean"},
    },
    "required-undeclared": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["z", "a"],
    },
}
COVERED = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
    "pattern", "items", "minItems", "maxItems", "$ref",
}


def _ascii_pattern(validator, pattern, instance, schema):
    if isinstance(instance, str) and not re.search(pattern, instance, re.ASCII):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _declared(schema) -> set:
    """Every name under some `properties` or `required` of `schema`."""
    out = set()
    if isinstance(schema, dict):
        out.update(schema.get("properties", {}))
        if isinstance(schema.get("required"), list):
            out.update(schema["required"])
        for v in schema.values():
            out |= _declared(v)
    elif isinstance(schema, list):
        for v in schema:
            out |= _declared(v)
    return out


def _no_repeated(declared):
    def hook(pairs):
        keys = [k for k, _ in pairs if k in declared]
        if len(set(keys)) != len(keys):
            raise ValueError("repeated declared key")
        return dict(pairs)

    return hook


def _decimal(text: str) -> Decimal:
    """The exact value; an exponent beyond what Decimal reads (|E| ≥ 10**18) as ±10**17,
    which orders the same against every schema number."""
    mant, e, exp = text.lower().partition("e")
    if e and len(exp.lstrip("+-").lstrip("0")) > 17:
        exp = ("-" if exp.startswith("-") else "") + "1" + "0" * 17
    return Decimal(mant + e + exp)


def _decimal_int(text: str) -> int | Decimal:
    return int(text) if len(text) < 4000 else Decimal(text)


def _reject(name):
    raise ValueError(name)


def _has_surrogate(x):
    if isinstance(x, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in x)
    if isinstance(x, list):
        return any(_has_surrogate(v) for v in x)
    if isinstance(x, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in x.items())
    return False


def reference_valid(schema, doc: bytes) -> bool:
    """json.loads + jsonschema, with the documented exact readings: no repeated
    declared keys, integers spelled as integers, exact decimals (the schema's floats
    read as their shortest decimal), ASCII pattern classes."""
    try:
        value = json.loads(
            doc.decode("utf-8"), object_pairs_hook=_no_repeated(_declared(schema)),
            parse_float=_decimal, parse_int=_decimal_int, parse_constant=_reject,
        )
    except ValueError:
        return False
    if _has_surrogate(value):
        return False
    base = validator_for(schema)
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda c, x: isinstance(x, int) and not isinstance(x, bool)
    )
    cls = extend(base, {"pattern": _ascii_pattern}, type_checker=checker)
    exact = json.loads(json.dumps(schema), parse_float=Decimal)  # schema numbers as decimals
    return cls(exact).is_valid(value)


# A schema-directed generator of (mostly) valid values -----------------------------

def gen_value(schema, root, rng: random.Random, depth=0):
    if schema is True or schema == {}:
        schema = {"type": rng.choice(["null", "boolean", "integer", "string", "array", "object"])}
    if "$ref" in schema:
        return gen_value(root["$defs"][schema["$ref"].split("/")[-1]], root, rng, depth + 1)
    if "anyOf" in schema:
        return gen_value(rng.choice(schema["anyOf"]), root, rng, depth)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    t = schema.get("type", "null")
    t = rng.choice(t) if isinstance(t, list) else t
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -50))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", lo + 200))
        if t == "integer":
            return rng.randint(int(lo), int(hi))
        return round(rng.uniform(lo, hi), rng.randint(0, 3))
    if t == "string":
        n = rng.randint(schema.get("minLength", 0), schema.get("maxLength", 6))
        text = "".join(rng.choice("abcb01é\"\\\n") for _ in range(n))
        return text
    if t == "array":
        lo = schema.get("minItems", 0)
        n = rng.randint(lo, max(lo, min(schema.get("maxItems", 3), 3 - depth // 2)))
        return [gen_value(schema.get("items", {}), root, rng, depth + 1) for _ in range(n)]
    props = schema.get("properties", {})
    keys = [k for k in props if k in schema.get("required", []) or rng.random() < 0.6]
    out = {k: gen_value(props[k], root, rng, depth + 1) for k in keys}
    extra = schema.get("additionalProperties", True)
    for k in schema.get("required", []):
        if k not in out and extra is not False:
            out[k] = gen_value(extra, root, rng, depth + 1)
    if extra is not False and rng.random() < 0.3:
        out[rng.choice(["q", "zz", "é"])] = gen_value(extra, root, rng, depth + 1)
    return out


def serialize(value, rng: random.Random) -> bytes:
    seps = rng.choice([(",", ":"), (", ", ": "), (" ,", " :")])
    text = json.dumps(value, separators=seps, ensure_ascii=rng.random() < 0.5)
    return (" " * rng.randint(0, 1) + text + "\n" * rng.randint(0, 1)).encode("utf-8")


_POTENTIALS: dict = {}


def potential(name) -> JsonSchema:
    if name not in _POTENTIALS:
        _POTENTIALS[name] = JsonSchema(SCHEMAS[name], spelling="any")
    return _POTENTIALS[name]


async def completion(p: JsonSchema, ctx: list, rng: random.Random, steps: int = 300):
    """A random completion of `ctx` drawn among the bytes `p` allows (None if not found)."""
    return await random_completion(p, ctx, rng, steps, close_bias=0.7)


@pytest.mark.parametrize("name", list(SCHEMAS))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
async def test_agrees_with_jsonschema(name, seed):
    p, schema, rng = potential(name), SCHEMAS[name], random.Random(seed)
    valid = [serialize(gen_value(schema, schema, rng), rng) for _ in range(3)]
    docs = valid + [mutate(d, rng) for d in valid for _ in range(2)]
    for doc in docs:
        want = reference_valid(schema, doc)
        assert (await p.complete(list(doc)) == 0.0) == want, doc
        if want:
            for i in range(len(doc) + 1):
                assert await p.prefix(list(doc[:i])) == 0.0, (doc, i)
    for doc in docs:
        ctx = list(doc)
        live = await p.prefix(ctx) == 0.0
        if any(v.startswith(doc) and reference_valid(schema, v) for v in valid):
            assert live, doc
        if live:
            witness = await completion(p, ctx, rng)
            if witness is not None:
                assert reference_valid(schema, witness), (doc, witness)
        else:
            assert await p.complete(ctx) == NEG_INF
            assert await p.prefix(ctx + [ord("}")]) == NEG_INF


@pytest.mark.parametrize("name", list(SCHEMAS))
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=12) | st.text("{}[]\",:0-1.e9 abtrunl\\é", max_size=14).map(str.encode))
async def test_random_bytes_agree_with_jsonschema(name, data):
    p, schema = potential(name), SCHEMAS[name]
    assert (await p.complete(list(data)) == 0.0) == reference_valid(schema, data)
    if await p.prefix(list(data)) == 0.0:
        witness = await completion(p, list(data), random.Random(len(data)))
        if witness is not None:
            assert reference_valid(schema, witness), (data, witness)


def test_keyword_table_covers_every_supported_keyword():
    used = set()

    def walk(s):
        if isinstance(s, dict):
            used.update(k for k in s if k in COVERED)
            for v in s.values():
                walk(v)
        elif isinstance(s, list):
            for v in s:
                walk(v)

    walk(SCHEMAS)
    assert used == COVERED


@pytest.mark.parametrize(
    "schema, doc, valid",
    [
        ({"type": "integer"}, b"1.0", False),
        ({"type": "integer"}, b"-0", True),
        ({"type": "number", "minimum": 0.1}, b"1e-1", True),
        ({"type": "number", "exclusiveMinimum": 0.1}, b"10e-2", False),
        ({"type": "number", "maximum": 0}, b"-0.0e5", True),
        ({"enum": [1]}, b"1.00e0", True),
        ({"enum": [1]}, b"1.001", False),
        ({"type": "integer", "enum": [1]}, b"1.0", False),
        ({"properties": {"a": {}}}, b'{"a":1,"a":2}', False),
        ({"properties": {"a": {}}}, b'{"a":1,"\\u0061":2}', False),
        ({"properties": {"a": {}}}, b'{"b":1,"b":2}', True),
        ({"type": "object", "required": ["z"]}, b'{"z": [1, {"y": null}]}', True),
        ({"type": "object", "required": ["z"]}, b'{"a": 1, "z": "x"}', True),
        ({"type": "object", "required": ["z"]}, b'{"a": 1}', False),
        ({"type": "object", "required": ["z"]}, b'{"z": 1, "z": 2}', False),
        ({"required": ["z"], "additionalProperties": {"type": "string"}}, b'{"z": 1}', False),
        ({"required": ["z"], "additionalProperties": {"type": "string"}}, b'{"z": "1"}', True),
        ({"additionalProperties": {"type": "string"}}, b'{"b":1,"b":"x"}', False),
        ({"type": "string", "maxLength": 1}, b'"\\ud83d\\ude00"', True),
        ({"type": "string"}, b'"\\ud83d"', False),
        ({"type": "string", "pattern": "^a$"}, b'"a\\n"', True),
        ({"type": "string", "pattern": "\\d"}, b'"x\xd9\xa3"', False),
        ({"const": "é"}, b'"\\u00e9"', True),
        ({"type": "number"}, b"NaN", False),
        ({"type": "number"}, b"1e99999999999999999999999", True),
        ({"type": "number", "maximum": 10}, b"1e99999999999999999999999", False),
        ({"type": "number", "exclusiveMinimum": 0}, b"1e-99999999999999999999999", True),
        ({"type": "number", "maximum": 0}, b"1e-99999999999999999999999", False),
        ({"type": "integer", "maximum": 10**20}, b"9" * 5000, False),
        ({"type": "integer", "minimum": 10**20}, b"9" * 5000, True),
        ({"type": "number", "maximum": 1}, b"0." + b"9" * 5000, True),
        ({"type": "number", "exclusiveMaximum": 1}, b"0." + b"9" * 5000 + b"e1", False),
        ({}, b"\xef\xbb\xbf1", False),
    ],
)
async def test_documented_readings(schema, doc, valid):
    p = JsonSchema(schema, spelling="any")
    assert (await p.complete(list(doc)) == 0.0) == valid


@pytest.mark.parametrize(
    "schema, prefix, live",
    [
        ({"type": "integer", "minimum": 5, "maximum": 7}, b"1", False),
        ({"type": "integer", "minimum": 15, "maximum": 17}, b"1", True),
        ({"type": "number", "minimum": 0.5, "maximum": 0.6}, b"7", False),
        ({"type": "number", "minimum": 0.5, "maximum": 0.6}, b"5", True),
        ({"type": "number", "minimum": 0.5, "maximum": 0.6}, b"0.7", False),
        ({"type": "number", "minimum": 1000, "maximum": 2000}, b"2e", True),
        ({"type": "number", "minimum": 1000, "maximum": 2000}, b"2e-", False),
        ({"type": "number", "minimum": 1000, "maximum": 2000}, b"2e4", False),
        ({"enum": [250]}, b"0.25e", True),
        ({"enum": [250]}, b"0.25e2", False),
        ({"type": "string", "pattern": "^[a-z]+$"}, b'"\\u00', True),
        ({"type": "string", "pattern": "^[a-z]+$"}, b'"\\u01', False),
        ({"type": "string", "maxLength": 2, "pattern": "x"}, b'"ab', False),
        ({"type": "object", "required": ["a"], "additionalProperties": False,
          "properties": {"a": {"type": "object", "required": ["b"],
                               "properties": {"b": False}}}}, b"", None),
    ],
)
async def test_prefix_is_exact(schema, prefix, live):
    if live is None:
        with pytest.raises(ValueError, match="accepts no document"):
            JsonSchema(schema, spelling="any")
        return
    p = JsonSchema(schema, spelling="any")
    assert (await p.prefix(list(prefix)) == 0.0) == live


async def test_check_potential():
    p = JsonSchema(SCHEMAS["object"], spelling="any")
    contexts = [[], list(b'{"na'), list(b'{"name":"ab"'), list(b'{"name":"a"}'), list(b"[")]
    await check_potential(p, contexts)
    q = JsonSchema(SCHEMAS["anyOf"], spelling="any")
    await check_potential(q, [[], list(b'"ab'), list(b"12"), list(b"nu")])


@pytest.mark.parametrize(
    "keyword, schema",
    [
        ("\\$dynamicRef", {"$dynamicRef": "#meta"}),
        ("\\$recursiveRef", {"$schema": "https://json-schema.org/draft/2019-09/schema",
                              "properties": {"a": {"$recursiveRef": "#"}}}),
        ("draft 3", {"$schema": "http://json-schema.org/draft-03/schema#", "type": "string"}),
    ],
)
def test_unsupported_keyword_is_named(keyword, schema):
    with pytest.raises(ValueError, match=keyword):
        JsonSchema(schema, spelling="any")


@pytest.mark.parametrize(
    "schema, match",
    [
        ({"type": "strin"}, "invalid JSON schema"),
        ({"minLength": -1}, "invalid JSON schema"),
        ({"$ref": "http://example.com/s.json"}, "does not point inside the schema"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "accepts no document"),
        ({"type": "string", "pattern": "(a"}, "invalid JSON schema"),
        ({"type": "string", "anyOf": [{"type": "integer"}]}, "accepts no document"),
        ({"type": "array", "items": [{}]}, "invalid JSON schema|items"),
    ],
)
def test_bad_schema_raises(schema, match):
    with pytest.raises(ValueError, match=match):
        JsonSchema(schema, spelling="any")


async def test_bad_tokens_raise():
    p = JsonSchema({}, spelling="any")
    for bad in ([256], ["a"], [b"a"], [True]):
        with pytest.raises(TypeError, match="byte value"):
            await p.prefix(bad)
    with pytest.raises(ValueError, match="weight zero"):
        await p.logw_next(list(b"}"))


def _synthetic_vocab(seed=0, n=600):
    rng = np.random.default_rng(seed)
    alphabet = list(b'{}[]",: abcn01-.e\\tru\n') + [0xC3, 0xA9]
    words = {bytes([b]) for b in alphabet}
    while len(words) < n:
        words.add(bytes(rng.choice(alphabet, size=int(rng.integers(2, 5))).tolist()))
    return sorted(words)


@pytest.mark.parametrize("name", ["object", "anyOf", "ref", "additional"])
async def test_coerced_rows_equal_generic_trie_walk(name):
    p = potential(name).spawn()
    vocab = _synthetic_vocab()
    fast = p.coerce(vocab, f=b"".join)
    slow = Coerced(p, vocab, b"".join)
    assert type(fast).__name__ == "CoercedJson"
    rng = random.Random(0)
    ctx = []
    for _ in range(12):
        a = (await fast.logw_next(ctx)).weights
        b = (await slow.logw_next(ctx)).weights
        np.testing.assert_array_equal(a, b)
        live = np.flatnonzero(a[:-1] == 0.0)
        if not len(live):
            break
        ctx.append(fast.vocab[int(rng.choice(live.tolist()))])
    await check_potential(fast, [ctx[:3], ctx[:1]], top=40)


@pytest.mark.parametrize("name", ["object", "ref", "enum"])
async def test_embedded_tokenizations_of_valid_documents(name):
    tok = embedded_tokenizer()
    vocab = embedded_vocab()
    by_id = {t.token_id: t for t in vocab}
    schema = SCHEMAS[name]
    coerced = JsonSchema(schema, spelling="any").coerce(vocab, f=b"".join)
    rng = random.Random(1)
    for _ in range(5):
        doc = serialize(gen_value(schema, schema, rng), rng)
        if not reference_valid(schema, doc):
            continue
        tokens = [by_id[i] for i in tok.encode(doc.decode("utf-8"), add_special_tokens=False)]
        assert b"".join(tokens) == doc
        for i in range(len(tokens)):
            row = await coerced.logw_next(tokens[:i])
            assert row[tokens[i]] == 0.0
            assert await coerced.prefix(tokens[: i + 1]) == 0.0
        assert (await coerced.logw_next(tokens))[EOS] == 0.0
        assert await coerced.complete(tokens) == 0.0


NUMBER_TEXT = st.from_regex(r"-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?", fullmatch=True)
BOUND = st.decimals(min_value=-2000, max_value=2000, places=2, allow_nan=False).map(float)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["number", "integer"]),
    lo=st.none() | BOUND, hi=st.none() | BOUND,
    lo_key=st.sampled_from(["minimum", "exclusiveMinimum"]),
    hi_key=st.sampled_from(["maximum", "exclusiveMaximum"]),
    text=NUMBER_TEXT,
)
async def test_number_ranges_agree_with_jsonschema(kind, lo, hi, lo_key, hi_key, text):
    schema = {"type": kind}
    if lo is not None:
        schema[lo_key] = lo
    if hi is not None:
        schema[hi_key] = hi
    try:
        p = JsonSchema(schema, spelling="any")
    except ValueError as e:
        assert "accepts no document" in str(e)
        return
    doc = text.encode()
    assert (await p.complete(list(doc)) == 0.0) == reference_valid(schema, doc)
    rng = random.Random(0)
    for i in range(len(doc) + 1):
        live = await p.prefix(list(doc[:i])) == 0.0
        if reference_valid(schema, doc):
            assert live
        if live:
            witness = await completion(p, list(doc[:i]), rng, steps=60)
            if witness is not None:
                assert reference_valid(schema, witness), (doc[:i], witness)
