"""The exact engine grammar of a JSON schema (`engine/_write_json.py`): where the
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

from toys.json_engine import RecognizerBytes, byte_tokenizer, disagreement_along, mutate  # noqa: E402

from genlm.control import JsonSchema  # noqa: E402
from genlm.control.constraints.json_schema._json_schema import (  # noqa: E402
    Arr,
    Lit,
    Num,
    Obj,
    Str,
    compile_schema,
)
from genlm.control.engine._guided_engine import grammar_text  # noqa: E402
from genlm.control.engine._translate import _write_json  # noqa: E402

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
# Strings with a `pattern` or a checked `format` (engine/_write_json_strings.py).
PATTERNS = {
    "pattern-anchored": {"type": "string", "pattern": "^#[0-9a-f]{2}$"},
    "pattern-search": {"type": "string", "pattern": "x-"},
    "pattern-head": {"type": "string", "pattern": "^a/"},
    "pattern-tail": {"type": "string", "pattern": "b$"},
    "pattern-escapes": {"type": "string", "pattern": '^["\\\\/\\n\\t]é\\.?$'},
    "pattern-dot": {"type": "string", "pattern": "^.{2}$"},
    "pattern-wide": {"type": "string", "pattern": "^[\U0001F600-\U0001F602\u00e9-\u0800]+$"},
    "pattern-negated": {"type": "string", "pattern": "^[^a\\x00-\\x1f]{1,2}$"},
    "pattern-flags": {"type": "string", "pattern": "^(?i:ab)|\\d\\s$"},
    "pattern-key": {"type": "object", "properties": {"v": {"type": "string", "pattern": "^[0-9]+$"}},
                    "additionalProperties": {"type": "string", "pattern": "^\\w$"}},
    "format-date": {"type": "string", "format": "date"},
    "format-time": {"type": "string", "format": "time"},
    "format-date-time": {"type": "string", "format": "date-time"},
    "format-email": {"type": "string", "format": "email"},
    "format-uuid": {"type": "string", "format": "uuid"},
    "format-ipv4": {"type": "string", "format": "ipv4"},
    "format-ipv6": {"type": "string", "format": "ipv6"},
    "format-uri": {"type": "string", "format": "uri"},
    "format-json-pointer": {"type": "string", "format": "json-pointer"},
}
SHAPES.update(PATTERNS)
FILES = {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "benchmarks" / "schemas").glob("*.json"))}
TAKEN = {k: s for k, s in FILES.items() if isinstance(_write_json(s), str)}
CASES = {**SHAPES, **{f"file-{k}": s for k, s in TAKEN.items()}}
# Served with checks (engine/_json_checked.py): bounded numbers, schemas read as a
# superset on prefixes.
BOUNDED = {
    "number-unit": {"type": "number", "minimum": 0, "maximum": 1},
    "number-open": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 0.25},
    "number-negative": {"type": "array", "items": {"type": "number", "minimum": -80, "maximum": -0.05}},
    "number-point": {"type": "number", "minimum": 0.5, "maximum": 0.5},
    "number-above": {"type": "number", "minimum": -1.5},
    "number-below": {"type": "number", "exclusiveMaximum": 100},
}
CHECKED_FILES = {k: s for k, s in FILES.items() if k not in TAKEN and _write_json(s) is not None}
CHECKED = {**BOUNDED, **{f"file-{k}": s for k, s in CHECKED_FILES.items()}}


class LarkBytes:
    """The engine's matcher for the grammar written from `schema`, over single bytes."""

    def __init__(self, schema):
        text = _write_json(schema)
        assert text is not None
        self.root = llg.LLMatcher(byte_tokenizer(), grammar_text("lark", text), log_level=0)
        assert not self.root.is_error(), self.root.get_error()


def test_the_shapes_and_the_benchmark_schemas_take_the_grammar():
    from genlm.control.engine._json_checked import CheckedSource
    from genlm.control.engine._json_exact import engine_difference

    assert all(isinstance(_write_json(s), str) for s in SHAPES.values())
    assert all(isinstance(_write_json(s), CheckedSource) for s in BOUNDED.values())
    # every benchmark schema takes the engine: as written (whitelist), a grammar, or checked
    off = {k for k, s in FILES.items() if engine_difference(s) is not None}
    assert off <= set(TAKEN) | set(CHECKED_FILES) and len(off) == 60
    assert {"multiple_of", "string_set", "not_string", "geo_point", "probability"} <= set(CHECKED_FILES)
    assert {"any_json", "open_object", "tree_node", "env_vars", "tags"} <= set(TAKEN)
    with_pattern = {k for k, s in FILES.items() if '"pattern"' in json.dumps(s) or '"format"' in json.dumps(s)}
    assert with_pattern - {"one_of_payment", "pattern_properties"} <= set(TAKEN)


def test_a_pattern_beside_a_length_or_a_format_is_not_written():
    from genlm.control.engine._write_json import Written, schema_grammar

    for schema in [{"type": "string", "pattern": "^a+$", "maxLength": 3},
                   {"type": "string", "pattern": "^1", "format": "ipv4"},
                   {"type": "string", "format": "hostname"}]:  # a length cap of 253
        assert schema_grammar(compile_schema(schema).root).written is Written.UNWRITABLE


def test_hex_spans_are_exactly_their_values():
    import re

    from genlm.control.engine._write_json_strings import hex_span

    rng = random.Random(0)
    for lo, hi in [(0, 0xFFFF), (0x20, 0x7E), (0xD7FF, 0xE000), (0x1234, 0x1234), (0xABC, 0xF00F)] + [
            tuple(sorted(rng.sample(range(0x10000), 2))) for _ in range(20)]:
        r = re.compile(hex_span(lo, hi))
        for v in list(range(max(0, lo - 40), min(0x10000, hi + 40))) + rng.sample(range(0x10000), 300):
            text = "".join(rng.choice([d, d.upper()]) for d in f"{v:04x}")
            assert bool(r.fullmatch(text)) == (lo <= v <= hi), (lo, hi, text)


# Byte strings ----------------------------------------------------------------------


def every_short_string(schema, alphabet: bytes, max_len: int):
    """The first byte string up to `max_len` bytes over `alphabet` where the two disagree."""
    eng, js = LarkBytes(schema), JsonSchema(schema, spelling="any")
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
    ("pattern-anchored", b'"#0af\\u', 6),
    ("pattern-search", b'"x-\\u02d', 6),
    ("pattern-head", b'"a/\\u2f', 6),
    ("pattern-tail", b'"b\\nu0a', 6),
    ("pattern-escapes", b'"\\/nt.\xc3\xa9u', 6),
    ("pattern-dot", b'"a\\nu0', 5),
    ("pattern-negated", b'"aA\\u01f', 6),
    ("pattern-flags", b'"aAB1 \\t', 5),
    ("format-date", b'"0129-', 6),
    ("format-ipv4", b'"0125.', 6),
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


POOL = '"\\/\n\t\x7f aAzZ09#-.:_@Té€\U0001F600\U0001F601'


def sample(tree, rng: random.Random) -> str:
    """A random string of a `regex.syntax` tree."""
    kind = tree[0]
    if kind == "set":
        inside = [c for c in POOL if any(a <= ord(c) <= b for a, b in tree[1])]
        if inside and rng.random() < 0.6:
            return rng.choice(inside)
        while True:
            a, b = rng.choice(tree[1])
            cp = rng.randint(a, min(b, a + rng.choice([5, 200, 70000])))
            if not 0xD800 <= cp <= 0xDFFF:
                return chr(cp)
    if kind == "cat":
        return "".join(sample(x, rng) for x in tree[1])
    if kind == "alt":
        return sample(rng.choice(tree[1]), rng)
    _, lo, hi, sub = tree
    return "".join(sample(sub, rng) for _ in range(rng.randint(lo, lo + 3 if hi is None else min(hi, lo + 3))))


def edit(text: str, rng: random.Random) -> str:
    """`text` with one character replaced, removed, inserted or doubled (a near miss)."""
    i = rng.randint(0, len(text))
    c = rng.choice(POOL + "0123456789abcdef")
    return rng.choice([text[:i] + c + text[i + 1:], text[:i] + text[i + 1:], text[:i] + c + text[i:],
                       text[:i] + text[i:i + 1] * 2 + text[i + 1:]])


def pattern_text(a, rng: random.Random, edits: bool) -> str:
    from genlm.control.constraints.regex.syntax import parse_regex

    text = sample(parse_regex(a.pattern.regex), rng)
    return edit(text, rng) if edits and rng.random() < 0.7 else text


def gen(node, rng: random.Random, depth: int = 0, edits: bool = False) -> str:
    """A document of the compiled `node`, spelled at random (`edits`: strings with a
    pattern are often one edit away from one, so the document may be invalid)."""
    alts = node.alts
    if depth > 3:
        alts = [a for a in alts if not isinstance(a, (Obj, Arr))] or alts
    a = rng.choice(alts)
    if isinstance(a, Lit):
        return a.text.decode()
    if isinstance(a, Num) and edits and not a.integer and rng.random() < 0.5:
        edge = [e for e in (a.bounds.lo, a.bounds.hi) if e is not None] or [Decimal(1)]
        e = rng.choice(edge)
        return rng.choice([str(e), f"{e}1", f"{e}0e0", f"{e * 10}e-1", f"{e / 10}E+1", f"{e * 100}e-2",
                           f"{e}e-400", "1e400", "-0", "-0.0e5", "0.5e1", "5E-1", "1e0", "0.01e2", "9e1",
                           f"{e + Decimal('0.0001')}", f"{e - Decimal('0.0001')}", str(-e), f"-{e}e0"])
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
        if a.pattern is not None:
            return spell(pattern_text(a, rng, edits), rng)
        hi = a.max_len if a.max_len is not None else a.min_len + 4
        return spell(random_text(rng, rng.randint(a.min_len, hi)), rng)
    if isinstance(a, Arr):
        hi = a.max_items if a.max_items is not None else a.min_items + 3
        if a.items is None or not a.items.alts:
            hi = min(hi, len(a.fixed))
        n = rng.randint(a.min_items, min(hi, a.min_items + 3))
        nodes = [a.fixed[i] if i < len(a.fixed) else a.items for i in range(n)]
        return "[" + ",".join(ws(rng) + gen(x, rng, depth + 1, edits) + ws(rng) for x in nodes) + "]"
    return gen_object(a, rng, depth, edits)


def gen_object(a, rng: random.Random, depth: int, edits: bool = False) -> str:
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
    body = ",".join(f"{ws(rng)}{spell(k, rng)}{ws(rng)}:{ws(rng)}{gen(v, rng, depth + 1, edits)}{ws(rng)}"
                    for k, v in members)
    return "{" + body + "}"


def near_misses(doc: bytes, rng: random.Random) -> list[bytes]:
    return [doc[:-1], doc + doc[-1:], b" " + doc + b"\n", doc.replace(b"\\u", b"\\U", 1),
            doc.replace(b'"', b'"\\', 1), doc.replace(b",", b",,", 1), doc.replace(b":", b"", 1),
            doc.replace(b"}", b',"x":1}', 1), b"\xef\xbb\xbf" + doc] + [mutate(doc, rng) for _ in range(8)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_grammar_agrees_on_generated_documents_and_near_misses(name):
    schema = CASES[name]
    pair, rec, rng = (LarkBytes(schema), JsonSchema(schema, spelling="any")), RecognizerBytes(schema), random.Random(name)
    root = compile_schema(schema).root
    for _ in range(30):
        doc = gen(root, rng).encode()
        assert rec.complete(doc), doc  # the generator writes valid documents
        for d in [doc, *near_misses(doc, rng)]:
            assert disagreement_along(pair, d) is None, (name, d)
    for _ in range(30):  # strings one edit away from their pattern
        doc = gen(root, rng, edits=True).encode()
        assert disagreement_along(pair, doc) is None, (name, doc)


@pytest.mark.parametrize("name", sorted(CASES))
def test_grammar_agrees_on_random_walks_from_either_side(name):
    """Byte by byte, the two allow the same next bytes; the walk draws one of them
    (often a closing one), so both sides' prefixes are visited."""
    schema = CASES[name]
    eng, js, rng = LarkBytes(schema), JsonSchema(schema, spelling="any"), random.Random("walk" + name)
    for _ in range(12):
        m, q, doc = eng.root.deep_copy(), js.state_of([]), b""
        for _ in range(40):
            assert m.is_accepting() == js.transitions.accepts(q), (name, doc)
            mine = [b for b in range(256) if js.advance(q, b) is not None]
            theirs = [b for b in range(256) if m.validate_tokens([b]) == 1]
            assert mine == theirs, (name, doc)
            if not mine:
                break
            closers = [b for b in mine if b in b'"}],']
            b = rng.choice(closers) if closers and rng.random() < 0.3 else rng.choice(mine)
            m.consume_token(b)
            q, doc = js.advance(q, b), doc + bytes([b])


# Served with checks: the grammars bound the language ----------------------------------


class CheckedBytes:
    """The `sup` and `sub` grammars of a checked schema (sub None: the grammar is the
    recognizer's prefix language), over single bytes."""

    def __init__(self, schema):
        source = _write_json(schema)
        self.sup = llg.LLMatcher(byte_tokenizer(), grammar_text("lark", source.sup), log_level=0)
        self.sub = None if source.sub is None else llg.LLMatcher(
            byte_tokenizer(), grammar_text("lark", source.sub), log_level=0)
        self.gated = source.gated


def sandwich_along(checked: CheckedBytes, js: JsonSchema, doc: bytes):
    """The first prefix of `doc` where `sub ⊆ JsonSchema ⊆ sup` fails on prefixes or on
    complete documents (with no `sub`: where `sup` differs from the recognizer; with
    a gated `sup`: where it differs on a prefix holding no `e` or `E`)."""
    sup, sub, q = checked.sup.deep_copy(), checked.sub and checked.sub.deep_copy(), js.state_of([])
    for i in range(len(doc) + 1):
        exact = checked.sub is None or (checked.gated and b"e" not in doc[: i + 1].lower())
        up, mid = sup.is_accepting(), js.transitions.accepts(getattr(q, "machine", q))
        low = sub is not None and sub.is_accepting()
        if (exact and up != mid) or (low and not mid) or (mid and not up):
            return doc[:i], "complete"
        if i == len(doc):
            return None
        b = doc[i]
        q = js.advance(q, b)
        exact = checked.sub is None or (checked.gated and b"e" not in doc[: i + 1].lower())
        up, mid = sup.validate_tokens([b]) == 1, q is not None
        low = sub is not None and sub.validate_tokens([b]) == 1
        if (exact and up != mid) or (low and not mid) or (mid and not up):
            return doc[: i + 1], "prefix"
        if not mid:
            return None
        sup.consume_token(b)
        if low:
            sub.consume_token(b)
        else:
            sub = None


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_checked_grammars_bound_the_language(name):
    schema = CHECKED[name]
    checked, js, rng = CheckedBytes(schema), JsonSchema(schema, spelling="any"), random.Random("bound" + name)
    root = compile_schema(schema).root
    for _ in range(40):
        doc = gen(root, rng, edits=rng.random() < 0.5).encode()
        for d in [doc, *near_misses(doc, rng)]:
            assert sandwich_along(checked, js, d) is None, (name, d)


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


@pytest.mark.parametrize("name", ["person", "typed-extra", "tuple", "file-tree_node", "file-user_with_format",
                                  "file-login_request", "pattern-escapes", "number-unit", "number-open",
                                  "number-negative", "number-point", "file-geo_point", "file-weather",
                                  "file-probability", "file-metrics", "file-multiple_of",
                                  "file-string_set", "file-not_string", "file-one_of_payment",
                                  "file-pattern_properties"])
def test_default_rows_equal_the_generic_rows(llm, name):
    from genlm.control.engine.guided import GuidedCoerced

    schema = {**CASES, **CHECKED}[name]
    fast = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join)
    slow = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join, engine=False)
    assert isinstance(fast, GuidedCoerced)
    rng, root = random.Random(name), compile_schema(schema).root

    async def rows(ctx):
        a, b = await fast.logw_next(ctx), await slow.logw_next(ctx)
        return np.isfinite(np.asarray(a.weights)), np.isfinite(np.asarray(b.weights))

    async def same(ctx, row):  # the single questions agree with the row
        eos = len(llm.vocab)
        picks = [eos] + rng.sample(range(eos), 3) + [int(i) for i in np.flatnonzero(row)[:4]]
        assert list(await fast.allowed_next(ctx, picks)) == [bool(row[i]) for i in picks], b"".join(ctx)
        assert (await fast.complete(ctx) == 0) == (await slow.complete(ctx) == 0) == bool(row[-1])
        for i in picks[1:]:
            if i < eos:
                assert (await fast.prefix(ctx + [llm.vocab[i]]) == 0) == bool(row[i])

    async def check():
        for k in range(6):
            doc = gen(root, rng, edits=k % 2 == 1).encode()
            ctx = tokenize(llm, doc, rng)
            for i in range(len(ctx) + 1):
                if await slow.prefix(ctx[:i]) != 0:
                    break  # an edited document leaves the language here
                a, b = await rows(ctx[:i])
                assert np.array_equal(a, b), (name, b"".join(ctx[:i]))
                await same(ctx[:i], a)
            for _ in range(6):  # random walks on allowed non-space tokens
                walk = ctx[: rng.randint(0, len(ctx))]
                while await slow.prefix(walk) != 0:
                    walk = walk[:-1]
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

    from genlm.control.engine._write_json_numbers import integer_regex

    r = re.compile(integer_regex(lo, hi))
    for n in range(-70000, 70000, 7):
        assert bool(r.fullmatch(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), n
    for n in [lo, hi]:
        if n is not None:
            assert r.fullmatch(str(n))
    assert bool(r.fullmatch("-0")) == ((lo is None or lo <= 0) and (hi is None or hi >= 0))
    assert not any(r.fullmatch(s) for s in ["01", "-01", "00", "+1", "1.0", "1e0", ""])


@pytest.mark.parametrize("lo, lo_incl, hi, hi_incl", [
    ("0", True, "1", True), ("-90", True, "90", True), ("-80", True, "60", True), ("0.25", False, "2.5", False),
    ("-1.05", True, "-0.3", False), (None, True, "3.14", True), ("-2.5", False, None, True), ("0", False, "0", True),
    ("0", True, "0", True), ("0.5", True, "0.5", True), ("0.05", True, "0.051", True), ("-0.5", False, "0", False),
    ("1", True, "10", False), ("0", False, None, True)])
def test_bounded_decimals_without_exponent_are_exactly_their_spellings(lo, lo_incl, hi, hi_incl):
    import re

    from genlm.control.engine._write_json_numbers import decimal_regex

    lo, hi = (None if x is None else Decimal(x) for x in (lo, hi))
    text = decimal_regex(lo, lo_incl, hi, hi_incl)
    r = None if text is None else re.compile(text)
    rng = random.Random(f"{lo}{hi}")
    wholes = [0, 1, 2, 3, 9, 10, 59, 60, 61, 79, 80, 81, 89, 90, 91, 99, 100, 101]
    fracs = ["", "", ".0", ".5", ".05", ".25", ".250", ".3", ".051", ".0510", ".0509", ".14", ".15", ".049"]
    for _ in range(3000):
        t = rng.choice(["", "-"]) + str(rng.choice(wholes + [rng.randint(0, 300)]))
        t += rng.choice(fracs + ["." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 4)))])
        x = Decimal(t)
        want = (lo is None or x > lo or (lo_incl and x == lo)) and (hi is None or x < hi or (hi_incl and x == hi))
        assert (r is not None and r.fullmatch(t) is not None) == want, t
    assert r is None or not any(r.fullmatch(t) for t in ["01", "1.", ".5", "+1", "1e0", "--1", "00.5", ""])


@pytest.mark.parametrize("lo, lo_incl, hi, hi_incl", [
    ("0", True, "1", True), ("-90", True, "90", True), ("0.25", False, "2.5", False), ("0.25", True, "2.5", False),
    ("0.25", False, "2.5", True), ("1", True, "10", False), ("2", True, "3", True), ("-1.05", True, "-0.3", False),
    ("-80", True, "-0.05", True), (None, True, "3.14", True), ("-2.5", False, None, True), ("0", False, "0", True),
    ("0.5", True, "0.5", True), ("0.001", True, "1000", False), ("0", False, "1", False), ("-1", False, "0", True),
    ("5", False, None, True), (None, True, "-7", False)])
def test_exponent_mantissas_are_those_some_exponent_brings_within(lo, lo_incl, hi, hi_incl):
    # brute force over k: exactly the mantissas `m` with some `m e k` within, where the
    # sign decides; None where it does not (or no mantissa is in)
    import re

    from genlm.control.engine._write_json_numbers import exponent_mantissas

    lo, hi = (None if x is None else Decimal(x) for x in (lo, hi))
    text = exponent_mantissas(lo, lo_incl, hi, hi_incl)

    def inside(x):
        return (lo is None or x > lo or (lo_incl and x == lo)) and (hi is None or x < hi or (hi_incl and x == hi))

    def truth(m):
        x = Decimal(m)
        return inside(x) if x == 0 else any(inside(x.scaleb(k)) for k in range(-40, 41))

    rng = random.Random(f"gate{lo}{hi}{lo_incl}{hi_incl}")
    wholes = ["0", "1", "2", "25", "3", "5", "9", "10", "99", "100", "12345", "7"]
    fracs = ["", "", ".0", ".00", ".5", ".05", ".25", ".3", ".0001", ".14", ".999"]
    spellings = {"0", "-0", "0.0", "-0.000"}
    for _ in range(1500):
        spellings.add(rng.choice(["", "-"]) + rng.choice(wholes) + rng.choice(fracs))
    verdicts = {m: truth(m) for m in spellings}
    if text is None:  # the sign does not decide (or nothing is within)
        by_sign = {True: set(), False: set()}
        for m, v in verdicts.items():
            if Decimal(m) != 0:
                by_sign[m.startswith("-")].add(v)
        assert not any(verdicts.values()) or any(len(v) > 1 for v in by_sign.values())
        return
    r = re.compile(text)
    for m, v in verdicts.items():
        assert (r.fullmatch(m) is not None) == v, m
    assert not any(r.fullmatch(t) for t in ["01", "1.", ".5", "+1", "1e0", "--1", "00.5", "", "-"])


@pytest.mark.parametrize("name, texts", [
    ("number-unit", [b"0.5e", b"0.5e-3", b"5e-1", b"1e+0", b"0.0e9", b"-0e5", b"-0.5", b"12E-2", b"0.001e3",
                     b"1.5e0", b"9e-9999", b"0.01e2"]),
    ("number-negative", [b"[-5e1", b"[-0.8e2,-1e-1]", b"[-81", b"[-8e1, -0.5E+0", b"[-1e0"]),
    ("number-point", [b"0.5", b"5e-1", b"0.05e1", b"50E-2"]),
])
def test_rows_inside_exponents_equal_the_generic_rows(llm, name, texts):
    # the exponent phase: the gated superset is checked there (and the ungated one everywhere)
    schema = CHECKED[name]
    fast = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join)
    slow = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join, engine=False)
    rng = random.Random(name)

    async def check():
        for text in texts:
            ctx = tokenize(llm, text, rng)
            for i in range(len(ctx) + 1):
                if await slow.prefix(ctx[:i]) != 0:
                    break
                a = np.isfinite(np.asarray((await fast.logw_next(ctx[:i])).weights))
                b = np.isfinite(np.asarray((await slow.logw_next(ctx[:i])).weights))
                assert np.array_equal(a, b), (name, b"".join(ctx[:i]))

    asyncio.run(check())


class _NumberTokens:
    """A duck-typed backend whose tokens write exponents in every way (`5e-3`, `e9`,
    `e+`, ...), so the gated superset's checks have tokens to refuse."""

    TEXTS = [b"0", b"1", b"5", b"9", b".", b"-", b"+", b"e", b"E", b"e9", b"e-", b"e+", b"5e", b"5e-3", b"1e2",
             b"e-1", b"0e0", b"E+1", b"e99", b"0.", b".5", b"[", b"]", b",", b" ", b"-0", b"00", b"<eos>"]

    def __init__(self):
        import torch

        from genlm.control.util import Token

        self.byte_vocab = [Token(i, t) for i, t in enumerate(self.TEXTS)]
        self.tokenizer = type("T", (), {"eos_token_id": len(self.TEXTS) - 1, "bos_token_id": None})()
        self._row = torch.full((len(self.TEXTS),), -float(np.log(len(self.TEXTS))), dtype=torch.float64)

    async def batch_next_token_logprobs(self, token_ids_list, **kwargs):
        return self._row.repeat(len(token_ids_list), 1)

    async def next_token_logprobs(self, token_ids, **kwargs):
        return self._row


@pytest.mark.parametrize("name", ["number-unit", "number-negative", "number-open", "number-above",
                                  "number-below", "number-point"])
def test_rows_over_exponent_tokens_equal_the_generic_rows_everywhere(name):
    # every context of up to 5 tokens the generic path allows: the rows, EOS
    # included, are the generic path's, and so are `allowed_next` over the whole
    # vocabulary, `complete` and `prefix` of the context
    from genlm.control import PromptedLLM
    from genlm.control.engine.guided import GuidedCoerced

    llm = PromptedLLM(_NumberTokens())
    schema = CHECKED[name]
    fast = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join)
    slow = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join, engine=False)
    assert isinstance(fast, GuidedCoerced)
    rng = random.Random(name)

    async def check():
        frontier, seen = [[]], 0
        for _ in range(5):
            grown = []
            for ctx in frontier:
                a = np.isfinite(np.asarray((await fast.logw_next(ctx)).weights))
                b = np.isfinite(np.asarray((await slow.logw_next(ctx)).weights))
                assert np.array_equal(a, b), (name, b"".join(ctx), [llm.vocab[i] for i in np.flatnonzero(a != b)])
                assert list(await fast.allowed_next(ctx, list(range(len(b))))) == list(b), (name, b"".join(ctx))
                assert (await fast.complete(ctx) == 0) == bool(b[-1]) and await fast.prefix(ctx) == 0
                for i in rng.sample(range(len(b) - 1), 3):
                    assert (await fast.prefix(ctx + [llm.vocab[i]]) == 0) == bool(b[i]), (name, b"".join(ctx), i)
                seen += 1
                grown += [ctx + [llm.vocab[i]] for i in np.flatnonzero(b[:-1])]
            frontier = grown
        return seen

    assert asyncio.run(check()) > 20


def test_the_bounded_benchmark_numbers_take_the_gated_superset():
    for name in ["number-unit", "number-negative", "file-probability", "file-geo_point", "file-metrics"]:
        assert _write_json(CHECKED[name]).gated, name
    assert not _write_json(CHECKED["number-point"]).gated  # a single value: narrower than a decade


def test_a_spawned_checked_coercion_keeps_its_rows(llm):
    import pickle

    schema = CHECKED["file-geo_point"]
    fast = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join)
    ctx = tokenize(llm, b'{"lat": 1', random.Random(0))

    async def row(p):
        return np.isfinite(np.asarray((await p.logw_next(ctx)).weights))

    first = asyncio.run(row(fast))
    spawned = fast.spawn()
    assert spawned.guided.sub._root is fast.guided.sub._root  # the compiled grammars are shared
    assert np.array_equal(first, asyncio.run(row(spawned)))
    sub_root = fast.guided.sub._root
    fast.guided.clear_cache()  # compiles both grammars again
    assert fast.guided.sub._root is not sub_root
    assert np.array_equal(first, asyncio.run(row(fast)))
    assert np.array_equal(first, asyncio.run(row(pickle.loads(pickle.dumps(fast)))))


def test_a_checked_batch_with_repeated_contexts_gives_each_its_row(llm):
    # the same matcher twice in one batch (AWRS asks for particles that share a prefix)
    schema = CHECKED["file-geo_point"]
    fast = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join)
    slow = JsonSchema(schema, spelling="any").coerce(llm, f=b"".join, engine=False)
    a = tokenize(llm, b'{"lat": 1', random.Random(0))
    b = tokenize(llm, b'{"lat": -9', random.Random(0))
    contexts = [a, b, a, [], b]

    async def check():
        rows = await fast.batch_logw_next(contexts)
        for ctx, row in zip(contexts, rows):
            want = np.isfinite(np.asarray((await slow.logw_next(ctx)).weights))
            assert np.array_equal(np.isfinite(np.asarray(row.weights)), want)
        block = np.asarray(await fast.batch_allowed(contexts))
        assert block.shape == (5, len(llm.vocab) + 1) and np.array_equal(block[0], block[2])

    asyncio.run(check())
