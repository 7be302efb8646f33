"""The JSON spellings (`JsonSchema(schema, spelling=...)`, `_json_spelling`): each
language is exact on the generic recognizer (against independent oracles: `json.loads`
with a scanner for whitespace outside strings, and `json.dumps` for the canonical
spelling, on every byte string up to a length) and on the engine path (the grammar
`_write_json` writes in that spelling equals the recognizer's language on every short
byte string and along random walks); the default is canonical, and the spelling is part
of the constraint's identity wherever the engine path caches or decides."""

import asyncio
import itertools
import json
import os
import random

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("llguidance")

from toys.json_engine import GrammarBytes, short_string_disagreement  # noqa: E402

from genlm.control import JsonSchema  # noqa: E402
from genlm.control.constraints.json_schema import CANONICAL_ESCAPES, SPELLINGS  # noqa: E402
from genlm.control.engine._translate import _write_json, engine_terms  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
SHAPES = [
    (PERSON, b'{}":,na 1\\u', 5),
    ({"type": "string", "maxLength": 2}, b'"\\u01fna\xc3\xa9/', 6),
    ({"type": "string", "pattern": '^[a\\n"]+$'}, b'"\\u0an/a', 6),
    ({"enum": ["a\n", 'q"']}, b'"\\u0anq', 6),
    ({"type": "array", "items": {"type": "integer"}}, b"[],1 -\t", 5),
    ({"type": "object", "additionalProperties": {"type": "null"}}, b'{}":a\\u0n ', 5),
    ({"type": "string", "format": "date"}, b'"019-\\u3', 6),
]


def outside_strings(text: str) -> str:
    """The characters of JSON text outside its strings."""
    out, in_str, esc = [], False, False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        else:
            out.append(c)
    return "".join(out)


def oracle(spelling: str, data: bytes) -> bool:
    """Whether `data` is a JSON text in `spelling` (independently of the recognizer)."""
    try:
        text = data.decode("utf-8")
        value = json.loads(text)
    except ValueError:
        return False
    if spelling == "any":
        return True
    if any(c in " \t\n\r" for c in outside_strings(text)):
        return False
    if spelling == "compact":
        return True
    return text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_spelling_is_its_language_on_every_short_string(spelling):
    """Values of any type, every byte string up to 4 bytes over an alphabet of
    structure, whitespace and escapes: complete agrees with the oracle (prefixes are
    pinned by the engine grammar below)."""
    js = JsonSchema({}, spelling=spelling)
    alphabet = b'"\\u0a/ [],:{}1'
    for n in range(5):
        for t in itertools.product(alphabet, repeat=n):
            data = bytes(t)
            q = js.state(t)
            got = q is not None and js.transitions.accepts(q)
            assert got == oracle(spelling, data), (spelling, data)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_string_spelling_is_judged_as_its_spelling_says(spelling):
    rng = random.Random(spelling)
    js = JsonSchema({"type": "string"}, spelling=spelling)
    for _ in range(300):
        text = "".join(
            rng.choice('ab/"\\\n\x01\x1f\x7fé€\U0001f600 ') for _ in range(rng.randint(0, 5))
        )
        for doc in [
            json.dumps(text),
            json.dumps(text, ensure_ascii=False),
            json.dumps(text, ensure_ascii=False).replace("/", "\\/"),
            json.dumps(text).upper().replace("\\U", "\\u"),
        ]:
            data = doc.encode()
            got = asyncio.run(js.complete(list(data))) == 0.0
            assert got == oracle(spelling, data), (spelling, doc)


def test_the_canonical_escapes_are_a_json_writers():
    for cp in range(0x80):
        c = chr(cp)
        spelled = json.dumps(c, ensure_ascii=False)[1:-1]
        assert (spelled in CANONICAL_ESCAPES) == (spelled != c)
        if spelled != c:
            assert CANONICAL_ESCAPES[spelled] == c
    assert len(CANONICAL_ESCAPES) == 34


@pytest.mark.parametrize("spelling", ["compact", "canonical"])
@pytest.mark.parametrize("schema, alphabet, n", SHAPES)
def test_the_engine_grammar_is_the_spellings_language(spelling, schema, alphabet, n):
    pair = (GrammarBytes(schema, spelling), JsonSchema(schema, spelling=spelling))
    assert short_string_disagreement(pair, alphabet, n) is None


@pytest.mark.parametrize("spelling", ["compact", "canonical"])
def test_the_engine_grammar_agrees_along_random_walks(spelling):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
            "born": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"enum": ["x", "y\n"]}},
            "n": {"type": "integer", "minimum": 1},
        },
        "required": ["name"],
    }
    eng, js, rng = (
        GrammarBytes(schema, spelling),
        JsonSchema(schema, spelling=spelling),
        random.Random(spelling),
    )
    for _ in range(10):
        m, q = eng.root.deep_copy(), js.state_of([])
        for _ in range(40):
            assert m.is_accepting() == js.transitions.accepts(q)
            mine = [b for b in range(256) if js.advance(q, b) is not None]
            assert mine == [b for b in range(256) if m.validate_tokens([b]) == 1]
            if not mine:
                break
            b = rng.choice(mine)
            m.consume_token(b)
            q = js.advance(q, b)


def test_the_default_is_rfc_8259_and_unknown_spellings_are_refused():
    """SPEC: `JsonSchema(schema)` accepts exactly the JSON documents valid under it."""
    assert JsonSchema(PERSON).spelling == "any"
    assert repr(JsonSchema(PERSON, spelling="compact")).endswith("spelling='compact')")
    with pytest.raises(ValueError, match="unknown JSON spelling 'tight'.*compact"):
        JsonSchema(PERSON, spelling="tight")


def test_the_spelling_is_part_of_the_engine_form_and_its_cache_key():
    texts = {sp: _write_json(PERSON, sp) for sp in SPELLINGS}
    assert len(set(texts.values())) == 3
    assert "IGN" in texts["any"] and "IGN" not in texts["compact"]  # the translated %ignore
    # a whitelisted shape: as written in "any"; the written grammar in the others
    ints = {"type": "array", "items": {"type": "integer"}}
    decided = {sp: engine_terms(JsonSchema(ints, spelling=sp).engine_source()) for sp in SPELLINGS}
    assert decided["any"].kind == "json_schema" and decided["any"].exactness.name == "EXACT"
    for sp in ("compact", "canonical"):
        assert decided[sp].kind == "lark" and decided[sp].exactness.name == "EXACT"
        assert "IGN" not in decided[sp].source


def test_an_unwritten_schema_takes_the_engines_compact_json_inexactly():
    schema = {"type": "string", "pattern": "^a+$", "maxLength": 3}  # not written
    for sp in ("compact", "canonical"):
        d = engine_terms(JsonSchema(schema, spelling=sp).engine_source(), exact=False)
        assert d.exactness.name == "INEXACT" and sp in d.reason
        assert d.source["x-guidance"]["whitespace_flexible"] is False
