"""The exact engine grammar of a JSON schema (`engine/_json_grammar.py`): where the
default coercion gives the engine the Lark grammar written from the compiled schema,
the engine's language is `JsonSchema`'s. Pinned on every byte string up to a length
over the bytes that matter, on documents generated from the compiled schema (random
spellings: escapes, `\\u` in either case, surrogate pairs, whitespace, free member
order, undeclared keys) with near-misses and random edits, and on token rows of the
embedded model: the engine's row equals the generic path's at every prefix."""

import asyncio
import json
import os
import random
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
llg = pytest.importorskip("llguidance")

from test_json import mutate  # noqa: E402
from toys.json_engine import RecognizerBytes, byte_tokenizer, disagreement_along  # noqa: E402

from genlm.control import JsonSchema  # noqa: E402
from genlm.control.potential.built_in.engine._guided_engine import grammar_text  # noqa: E402
from genlm.control.potential.built_in.engine._translate import _json_grammar  # noqa: E402
from genlm.control.potential.built_in.json_schema._json_schema import (  # noqa: E402
    Arr,
    Lit,
    Num,
    Obj,
    Str,
    compile_schema,
)

ROOT = Path(__file__).resolve().parents[2]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"]}  # benchmarks/workloads.py JSON_SCHEMA
SHAPES = {
    "person": PERSON,
    "closed": {"type": "object", "properties": {"a": {"type": "boolean"}, "ab": {"type": "null"}},
               "required": ["ab"], "additionalProperties": False},
    "typed-extra": {"type": "object", "properties": {"é": {"type": "string"}, "/": {"type": "number"}},
                    "additionalProperties": {"type": "integer"}},
    "escaped-name": {"type": "object", "properties": {'q"\\': {"type": "integer"}}, "required": ['q"\\']},
    "forbidden-key": {"type": "object", "required": ["j"], "properties": {"k": False, "j": {}}},
    "lengths": {"type": "string", "minLength": 2, "maxLength": 3},
    "string-enum": {"enum": ['a"b', "é", "x", "\U0001F600"]},
    "tuple": {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"},
              "minItems": 1, "maxItems": 3},
    "any": {},
    "int-ranges": {"type": "array", "items": {"anyOf": [
        {"type": "integer", "minimum": -12, "maximum": 105}, {"type": "integer", "exclusiveMinimum": 1450},
        {"type": "integer", "maximum": -7.5}]}},
    "int-zero": {"type": "integer", "minimum": 0, "maximum": 9},
    "number-nonnegative": {"type": "number", "minimum": 0},
    "number-positive": {"type": "number", "exclusiveMinimum": 0},
    "nested": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "array"}}}},
}
FILES = {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "benchmarks" / "schemas").glob("*.json"))}
TAKEN = {k: s for k, s in FILES.items() if _json_grammar(s) is not None}
CASES = {**SHAPES, **{f"file-{k}": s for k, s in TAKEN.items()}}


class LarkBytes:
    """The engine's matcher for the grammar written from `schema`, over single bytes."""

    def __init__(self, schema):
        text = _json_grammar(schema)
        assert text is not None
        self.root = llg.LLMatcher(byte_tokenizer(), grammar_text("lark", text), log_level=0)
        assert not self.root.is_error(), self.root.get_error()


def test_the_shapes_and_the_benchmark_schemas_take_the_grammar():
    assert all(_json_grammar(s) is not None for s in SHAPES.values())
    assert "pattern" in json.dumps(FILES["hex_color"]) and "hex_color" not in TAKEN
    assert {"any_json", "open_object", "tree_node", "env_vars", "tags"} <= set(TAKEN)


# Byte strings ----------------------------------------------------------------------


def every_short_string(schema, alphabet: bytes, max_len: int):
    """The first byte string up to `max_len` bytes over `alphabet` where the two disagree."""
    eng, js = LarkBytes(schema), JsonSchema(schema)
    stack = [(b"", eng.root, js.state_of([]))]
    while stack:
        doc, m, q = stack.pop()
        if m.is_accepting() != js.transitions.accepts(q):
            return doc
        if len(doc) == max_len:
            continue
        for b in alphabet:
            live, q2 = m.validate_tokens([b]) == 1, js.advance(q, b)
            if live != (q2 is not None):
                return doc + bytes([b])
            if live:
                m2 = m.deep_copy()
                m2.consume_token(b)
                stack.append((doc + bytes([b]), m2, q2))
    return None


@pytest.mark.parametrize("name, alphabet, n", [
    ("person", b'{}":,na 1\\u', 5),
    ("closed", b'{}":,ab nul', 5),
    ("escaped-name", b'{}":q\\u2', 6),
    ("lengths", b'"\\u0a\xc3\xa9', 6),
    ("string-enum", b'"\\ua\xc3\xa9bxd8', 5),
    ("tuple", b'[]",1 -\\', 5),
    ("any", b'{}[]":,1-. \\ut', 4),
    ("int-ranges", b"[],-0157 ", 6),
    ("int-zero", b"-019 .", 4),
    ("number-nonnegative", b"-01.eE+", 5),
    ("number-positive", b"-01.eE+", 5),
    ("int-ranges", b"[],-0157 ", 6),
    ("int-zero", b"-019 .", 4),
    ("number-nonnegative", b"-01.eE+", 5),
    ("number-positive", b"-01.eE+", 5),
])
def test_grammar_agrees_on_every_short_string(name, alphabet, n):
    assert every_short_string(SHAPES[name], alphabet, n) is None


# Generated documents ---------------------------------------------------------------


def spell_char(c: str, rng: random.Random) -> str:
    cp = ord(c)
    escapes = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
               "\r": "\\r", "\t": "\\t"}
    options = [] if cp < 0x20 or c in '"\\' else [c]
    if c in escapes:
        options.append(escapes[c])
    if cp <= 0xFFFF:
        options.append("\\u" + "".join(rng.choice([d, d.upper()]) for d in f"{cp:04x}"))
    else:
        hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
        options.append(f"\\u{hi:04X}\\u{lo:04x}")
    return rng.choice(options)


def spell(text: str, rng: random.Random) -> str:
    return '"' + "".join(spell_char(c, rng) for c in text) + '"'


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice('ab/"\\\n\x7fé€\U0001F600 x') for _ in range(n))


def ws(rng: random.Random) -> str:
    return rng.choice(["", "", " ", "\n\t", "\r "])


def within(d: Decimal, b) -> bool:
    above = b.lo is None or d > b.lo or (b.lo_incl and d == b.lo)
    return above and (b.hi is None or d < b.hi or (b.hi_incl and d == b.hi))


def gen(node, rng: random.Random, depth: int = 0) -> str:
    """A document of the compiled `node`, spelled at random."""
    alts = node.alts
    if depth > 3:
        alts = [a for a in alts if not isinstance(a, (Obj, Arr))] or alts
    a = rng.choice(alts)
    if isinstance(a, Lit):
        return a.text.decode()
    if isinstance(a, Num):
        near = [int(e) + k for e in (a.bounds.lo, a.bounds.hi) if e is not None for k in range(-2, 3)]
        while True:  # a spelling within the bounds
            x = str(rng.choice([rng.randint(-20, 20), rng.randint(-2000, 2000), *near]))
            x = x if a.integer else rng.choice([x, x + ".25", x + "e-2", x + "E+1", "-0.0"])
            if within(Decimal(x), a.bounds):
                return x
    if isinstance(a, Str):
        if a.values is not None:
            return spell(rng.choice(sorted(a.values)), rng)
        hi = a.max_len if a.max_len is not None else a.min_len + 4
        return spell(random_text(rng, rng.randint(a.min_len, hi)), rng)
    if isinstance(a, Arr):
        hi = a.max_items if a.max_items is not None else a.min_items + 3
        if a.items is None or not a.items.alts:
            hi = min(hi, len(a.fixed))
        n = rng.randint(a.min_items, min(hi, a.min_items + 3))
        nodes = [a.fixed[i] if i < len(a.fixed) else a.items for i in range(n)]
        return "[" + ",".join(ws(rng) + gen(x, rng, depth + 1) + ws(rng) for x in nodes) + "]"
    return gen_object(a, rng, depth)


def gen_object(a, rng: random.Random, depth: int) -> str:
    named = {k: a.props.get(k, a.additional) for k in set(a.props) | set(a.required)}
    named = {k: v for k, v in named.items() if v is not None and v.alts}
    keys = sorted(a.required) + [k for k in sorted(named) if k not in a.required and rng.random() < 0.5]
    members = [(k, named[k]) for k in keys]
    if a.additional is not None and a.additional.alts:
        for _ in range(rng.randint(0, 2)):
            k = random_text(rng, rng.randint(0, 3))
            if k not in set(a.props) | set(a.required):
                members.append((k, a.additional))
    rng.shuffle(members)
    body = ",".join(f"{ws(rng)}{spell(k, rng)}{ws(rng)}:{ws(rng)}{gen(v, rng, depth + 1)}{ws(rng)}"
                    for k, v in members)
    return "{" + body + "}"


def near_misses(doc: bytes, rng: random.Random) -> list[bytes]:
    return [doc[:-1], doc + doc[-1:], b" " + doc + b"\n", doc.replace(b"\\u", b"\\U", 1),
            doc.replace(b'"', b'"\\', 1), doc.replace(b",", b",,", 1), doc.replace(b":", b"", 1),
            doc.replace(b"}", b',"x":1}', 1), b"\xef\xbb\xbf" + doc] + [mutate(doc, rng) for _ in range(8)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_grammar_agrees_on_generated_documents_and_near_misses(name):
    schema = CASES[name]
    pair, rec, rng = (LarkBytes(schema), JsonSchema(schema)), RecognizerBytes(schema), random.Random(name)
    root = compile_schema(schema).root
    for _ in range(30):
        doc = gen(root, rng).encode()
        assert rec.complete(doc), doc  # the generator writes valid documents
        for d in [doc, *near_misses(doc, rng)]:
            assert disagreement_along(pair, d) is None, (name, d)


# Token rows of the embedded model ----------------------------------------------------


@pytest.fixture(scope="module")
def llm():
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")


def tokenize(llm, data: bytes, rng: random.Random) -> list:
    """`data` as tokens: at each point a random one of the three longest that fit."""
    by_bytes = {bytes(t): t for t in llm.vocab}
    out, i = [], 0
    while i < len(data):
        fits = [k for k in range(min(12, len(data) - i), 0, -1) if data[i: i + k] in by_bytes]
        k = rng.choice(fits[:3])
        out.append(by_bytes[data[i: i + k]])
        i += k
    return out


@pytest.mark.parametrize("name", ["person", "typed-extra", "tuple", "file-tree_node"])
def test_default_rows_equal_the_generic_rows(llm, name):
    from genlm.control.potential.built_in.engine.guided import GuidedCoerced

    schema = CASES[name]
    fast = JsonSchema(schema).coerce(llm, f=b"".join)
    slow = JsonSchema(schema).coerce(llm, f=b"".join, engine=False)
    assert isinstance(fast, GuidedCoerced)
    rng, root = random.Random(name), compile_schema(schema).root

    async def rows(ctx):
        a, b = await fast.logw_next(ctx), await slow.logw_next(ctx)
        return np.isfinite(np.asarray(a.weights)), np.isfinite(np.asarray(b.weights))

    async def check():
        for _ in range(4):
            doc = gen(root, rng).encode()
            ctx = tokenize(llm, doc, rng)
            for i in range(len(ctx) + 1):
                a, b = await rows(ctx[:i])
                assert np.array_equal(a, b), (name, b"".join(ctx[:i]))
            for _ in range(6):  # random walks on allowed non-space tokens
                walk = ctx[: rng.randint(0, len(ctx))]
                for _ in range(8):
                    a, b = await rows(walk)
                    assert np.array_equal(a, b), (name, b"".join(walk))
                    ok = [t for t, live in zip(llm.vocab, a) if live and bytes(t).strip()]
                    if not ok:
                        break
                    walk = walk + [rng.choice(ok)]

    asyncio.run(check())


def test_a_lead_byte_keeps_only_the_code_points_it_can_start():
    # E0 and F0 start U+0800.. and U+10000.. only (no overlong forms): no ASCII key follows
    closed = RecognizerBytes({"type": "object", "properties": {"a": {}}, "additionalProperties": False})
    assert not closed.prefix(b'{"\xe0') and not closed.prefix(b'{"\xf0') and closed.prefix(b'{"a')
    wide = RecognizerBytes({"enum": ["\u0800", "\U00010000"]})
    assert wide.prefix(b'"\xe0\xa0') and wide.prefix(b'"\xf0\x90') and not wide.prefix(b'"\xe1')


@pytest.mark.parametrize("lo, hi", [(0, 5), (-3, None), (None, -7), (1, 12), (-12, -1), (5, None), (13, 1450),
                                    (-180, 180), (0, 65535), (None, None), (1, 1), (100, 1000), (-99, 0)])
def test_integer_ranges_are_exactly_their_spellings(lo, hi):
    import re

    from genlm.control.potential.built_in.engine._json_numbers import integer_regex

    r = re.compile(integer_regex(lo, hi))
    for n in range(-70000, 70000, 7):
        assert bool(r.fullmatch(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), n
    for n in [lo, hi]:
        if n is not None:
            assert r.fullmatch(str(n))
    assert bool(r.fullmatch("-0")) == ((lo is None or lo <= 0) and (hi is None or hi >= 0))
    assert not any(r.fullmatch(s) for s in ["01", "-01", "00", "+1", "1.0", "1e0", ""])
