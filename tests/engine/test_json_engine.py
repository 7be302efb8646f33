"""The engine decision for `JsonSchema.coerce`: the default takes the compiled engine
only on the whitelist of `_json_exact`, and there the engine's language equals
`JsonSchema`'s. Established by exhaustive comparison on short byte strings, by
generated documents and near-misses on every benchmark schema the default sends
to the engine, and pinned off the list by one witness per documented difference."""

import json
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("llguidance")

from toys.json_engine import (  # noqa: E402
    EngineBytes,
    RecognizerBytes,
    disagreement_along,
    first_disagreement,
    mutate,
)

from genlm.control import JsonSchema  # noqa: E402
from genlm.control.engine._json_exact import REASONS, engine_difference  # noqa: E402
from genlm.control.engine._translate import _write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "benchmarks" / "schemas").glob("*.json"))
NUMBER_BYTES = b"-0123456789.eE+ "
ARRAY_BYTES = b"[],1-\t\n\r n"
LITERAL_BYTES = b"tfrueals n,[]"

# Shapes on the whitelist, each compared on every byte string up to a length.
WHITELISTED = [
    ({"type": "integer"}, NUMBER_BYTES, 4),
    ({"type": "number"}, NUMBER_BYTES, 4),
    ({"type": "integer", "minimum": 1, "maximum": 12}, NUMBER_BYTES, 4),
    ({"type": "integer", "minimum": -12, "maximum": -1}, NUMBER_BYTES, 4),
    ({"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 77}, NUMBER_BYTES, 4),
    ({"type": "integer", "minimum": 1.5, "maximum": 9.5}, NUMBER_BYTES, 4),
    ({"type": ["integer", "null"]}, NUMBER_BYTES + b"nul", 4),
    ({"type": ["number", "boolean"]}, NUMBER_BYTES + b"tfrueals", 4),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, ARRAY_BYTES, 6),
    ({"type": "array", "items": {"type": "array", "items": {"type": "null"}}, "maxItems": 2}, ARRAY_BYTES, 6),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, ARRAY_BYTES, 6),
    ({"enum": [True, None]}, LITERAL_BYTES, 7),
    ({"type": "array", "items": {"enum": [True, False]}}, LITERAL_BYTES, 7),
]
# Bigger sweeps of the same shapes (slow).
WHITELISTED_SLOW = [
    ({"type": "integer", "minimum": 100, "maximum": 1000}, NUMBER_BYTES, 5),
    ({"type": "integer", "minimum": -1000, "maximum": -100}, NUMBER_BYTES, 5),
    ({"type": "integer", "minimum": 5}, NUMBER_BYTES, 5),
    ({"type": "integer", "exclusiveMaximum": -7}, NUMBER_BYTES, 5),
    ({"type": "number"}, NUMBER_BYTES, 5),
    ({"type": "array", "items": {"type": ["integer", "null"]}, "minItems": 2}, ARRAY_BYTES, 7),
    ({"anyOf": [{"type": "array", "items": {"type": "boolean"}}, {"type": "null"}]}, LITERAL_BYTES, 8),
]


@pytest.mark.parametrize("schema, alphabet, n", WHITELISTED, ids=lambda x: json.dumps(x)[:50] if isinstance(x, dict) else None)
def test_whitelisted_shapes_agree_on_every_short_string(schema, alphabet, n):
    assert engine_difference(schema) is None
    assert first_disagreement(schema, alphabet, n) is None


@pytest.mark.slow
@pytest.mark.parametrize("schema, alphabet, n", WHITELISTED_SLOW)
def test_whitelisted_shapes_agree_on_longer_strings(schema, alphabet, n):
    assert engine_difference(schema) is None
    assert first_disagreement(schema, alphabet, n, limit=200_000) is None


@settings(max_examples=30, deadline=None)
@given(
    lo=st.integers(-10**6, 10**6), span=st.integers(0, 10**4),
    docs=st.lists(st.from_regex(r"-?(0|[1-9][0-9]{0,7})(\.[0-9]{1,2})?([eE][+-]?[0-9])?", fullmatch=True), max_size=12),
)
def test_integer_ranges_without_zero_agree(lo, span, docs):
    hi = lo + span
    if lo <= 0 <= hi:
        lo, hi = (1, 1 + span) if lo > -5 else (lo, -1)
    schema = {"type": "integer", "minimum": lo, "maximum": hi}
    assert engine_difference(schema) is None
    pair = (EngineBytes(schema), JsonSchema(schema, spelling="any"))
    for doc in [str(lo).encode(), str(hi).encode(), b"-0", *(d.encode() for d in docs)]:
        assert disagreement_along(pair, doc) is None, doc


# One witness per documented difference: off the list, the languages really differ.
WITNESSES = [
    ({"type": "string"}, b'"\\/"', "strings"),
    ({"type": "string"}, b'"\x7f"', "strings"),
    ({"type": "object", "properties": {"a": {}, "b": {}}}, b'{"b":1,"a":2}', "objects"),
    ({"properties": {"a": {}}, "additionalProperties": False, "type": "object"}, b'{"\\u0061":1}', "objects"),
    ({"type": "number", "maximum": 2.25}, b"3e-1", "number-bounds"),
    ({"type": "number", "exclusiveMaximum": 10}, b"-0", "number-bounds"),
    ({"type": "integer", "minimum": -5}, b"-0", "integer-zero"),
    ({"enum": [1.0]}, b"1.0", "enum-spelling"),
    ({"enum": ["a"]}, b'"\\u0061"', "enum-spelling"),
    ({}, b'"\\/"', "any-value"),
    ({"type": "array"}, b'["\\/"]', "any-value"),
]


@pytest.mark.parametrize("schema, doc, code", WITNESSES, ids=[w[2] + "-" + repr(w[1]) for w in WITNESSES])
def test_each_documented_difference_is_real(schema, doc, code):
    assert engine_difference(schema).code == code
    assert RecognizerBytes(schema).complete(doc)
    assert not EngineBytes(schema).complete(doc)


# Every benchmark schema -----------------------------------------------------------


def expected_row(path: Path) -> tuple[str, str]:
    """(default path, why) as the docs table states it."""
    schema = json.loads(path.read_text())
    try:
        JsonSchema(schema, spelling="any")
    except ValueError as e:
        keyword = re.search(r"keyword '([^']+)'", str(e))
        return "rejected", f"`{keyword.group(1)}` unsupported" if keyword else str(e)
    why = engine_difference(schema)
    if why is None:
        return "engine", ""
    where = why.where + (f" `{why.keyword}`" if why.keyword else "")
    grammar = _write_json(schema)
    path = "generic" if grammar is None else "grammar" if isinstance(grammar, str) else "checked"
    return path, f"`{where}` {why.code}"


def docs_table() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "constraint-engines.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_]+)\.json` \| (\w+) \| (.*?) \|$", text, flags=re.M)
    return {name: (path, why.strip()) for name, path, why in rows}


def test_docs_table_states_the_decision_for_every_benchmark_schema():
    assert len(FILES) == 64
    want = {p.stem: expected_row(p) for p in FILES}
    assert docs_table() == want
    assert set(REASONS) >= {w.split("` ")[-1] for path, w in want.values() if path != "engine" and w}


ENGINE_FILES = [p for p in FILES if expected_row(p)[0] == "engine"]


def gen_doc(schema, rng: random.Random, depth: int = 0):
    """A value of a whitelisted schema (no strings or objects)."""
    if "anyOf" in schema:
        return gen_doc(rng.choice(schema["anyOf"]), rng, depth)
    if "enum" in schema or "const" in schema:
        return rng.choice(schema.get("enum", [schema.get("const")]))
    t = schema["type"]
    t = rng.choice(t) if isinstance(t, list) else t
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -10**6))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 10**6))
        x = rng.randint(int(lo), int(hi))
        return x if t == "integer" or rng.random() < 0.5 else x + rng.random()
    lo = schema.get("minItems", 0)
    n = rng.randint(lo, max(lo, min(schema.get("maxItems", 4), 4 - depth)))
    return [gen_doc(schema["items"], rng, depth + 1) for _ in range(n)]


def near_misses(doc: bytes, rng: random.Random) -> list[bytes]:
    """Respellings (whitespace, number formats) and small edits of a document."""
    out = [doc.replace(b",", b" ,\t"), doc.replace(b"[", b"[\r\n"), b"\n" + doc + b" ",
           re.sub(rb"\d+", lambda m: m.group() + b".0", doc, count=1),
           re.sub(rb"\d+", lambda m: m.group() + b"e0", doc, count=1),
           re.sub(rb"\d+", lambda m: b"-0", doc, count=1),
           doc.replace(b"1", b"1E+1", 1), doc[:-1], doc + doc[-1:], b"\xef\xbb\xbf" + doc]
    return out + [mutate(doc, rng) for _ in range(6)]


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: p.stem)
def test_engine_schemas_agree_on_generated_documents_and_near_misses(path):
    schema = json.loads(path.read_text())
    pair, rec, rng = (EngineBytes(schema), JsonSchema(schema, spelling="any")), RecognizerBytes(schema), random.Random(path.stem)
    valid = 0
    for _ in range(40):
        doc = json.dumps(gen_doc(schema, rng), separators=rng.choice([(",", ":"), (", ", ": ")])).encode()
        assert rec.complete(doc), doc  # the generator writes valid documents
        valid += 1
        for d in [doc, *near_misses(doc, rng)]:
            assert disagreement_along(pair, d) is None, (path.stem, d)
    assert valid == 40


def test_the_default_picks_the_engine_for_these_four():
    assert sorted(p.stem for p in ENGINE_FILES) == ["int_list", "matrix", "rating", "yes_no"]


# The coercion itself ------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm():
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="mock")


def test_coerce_takes_the_engine_only_where_exact(llm, caplog):
    from genlm.control.constraints.json_schema._json_coerce import CoercedJson
    from genlm.control.engine.guided import GuidedCoerced

    exact = JsonSchema({"type": "array", "items": {"type": "integer"}}, spelling="any")
    written = JsonSchema({"type": "object", "required": ["z"]}, spelling="any")  # the grammar of _write_json
    off = JsonSchema({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$",
                                                             "maxLength": 3}}}, spelling="any")  # not written
    assert isinstance(exact.coerce(llm, f=b"".join), GuidedCoerced)
    assert exact.coerce(llm, f=b"".join).guided.kind == "json_schema"
    assert written.coerce(llm, f=b"".join).guided.kind == "lark"
    with caplog.at_level("DEBUG", logger="genlm.control.engine.guided"):
        assert isinstance(off.coerce(llm, f=b"".join), CoercedJson)
    assert "objects: the engine writes declared properties" in caplog.text
    assert isinstance(off.coerce(llm, f=b"".join, engine=True), GuidedCoerced)
    assert isinstance(exact.coerce(llm, f=b"".join, engine=False), CoercedJson)
