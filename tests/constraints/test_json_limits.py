"""Exactness of the bounded searches behind JSON schema limits: the pattern length
search (periodic layers instead of a walk to the bound), the pattern size estimate,
and `$ref` resolution against the root `$id`."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genlm.control import JsonSchema
from genlm.control.constraints.json_schema import check_document
from genlm.control.constraints.json_schema._json_string import (
    Pattern,
    pattern_size,
    sre_parse,
)

PATTERNS = ["^(ab)+$", "^a(bcd)*e$", "^x{3}y?$", "^(a|bc)*$", "^[a-c]{2,5}$", "^(aaa|aaaaa)+$", "^é+z$"]


def brute_length_ok(p: Pattern, q: int, count: int, lo: int, hi: int | None, horizon: int) -> bool:
    """Layer by layer up to `horizon` code points (enough for the small bounds drawn)."""
    layer = p._closure({q})
    for d in range(horizon + 1):
        if lo <= count + d and (hi is None or count + d <= hi) and layer & p.finals:
            return True
        layer = p._closure({t for s in layer for b, t in p.arcs[s].items() if not 0x80 <= b < 0xC0})
    return False


_COMPILED: dict = {}


@pytest.mark.parametrize("source", PATTERNS)
@settings(max_examples=25, deadline=None)
@given(count=st.integers(0, 6), lo=st.integers(0, 30), span=st.none() | st.integers(0, 30))
def test_length_search_equals_brute_force(source, count, lo, span):
    p = _COMPILED.setdefault(source, Pattern.compile(source))
    p._lengths.clear()
    hi = None if span is None else lo + span
    for q in range(len(p.arcs)):
        want = brute_length_ok(p, q, count, lo, hi, horizon=80)
        assert p.length_ok(q, count, lo, hi) == want, (source, q, count, lo, hi)


@pytest.mark.parametrize(
    "source, lo, hi, ok",
    [
        # `$` also matches before a final newline, which adds one code point
        ("^(aaa)+$", 10**9, None, True),  # lengths 3k and 3k + 1
        ("^(aaa)+$", 10**9 + 1, 10**9 + 1, False),  # 10**9 + 1 = 3k + 2
        ("^(aaa)+$", 10**9 + 1, 10**9 + 2, True),
        ("^(aaaa|aaaaaaa)+$", 10**9, 10**9, True),
        ("^x{3}$", 5, None, False),
        ("^x{3}$", 4, None, True),
    ],
)
def test_length_search_far_beyond_the_walk(source, lo, hi, ok):
    p = Pattern.compile(source)
    assert p.length_ok(p.start, 0, lo, hi) == ok


@pytest.mark.parametrize(
    "source, size",
    [("^a{300}$", 300), ("a{300}", 300), ("^.{7}$", 70), ("^(ab|c){4}x*$", 13), (r"^\d{4}-\w$", 6),
     ("^[^a]{3}$", 30), ("^é{2}$", 20), ("^(?:a{10}){10}$", 100)],
)
def test_pattern_size_estimate(source, size):
    assert pattern_size(sre_parse.parse(source)) == size


async def test_id_relative_refs_resolve_inside_the_document():
    schema = {"$id": "https://ex.com/dir/s.json", "$defs": {"n": {"type": "integer"}},
              "type": "array", "items": {"$ref": "s.json#/$defs/n"}}
    assert check_document(schema) == {"s.json#/$defs/n": "#/$defs/n"}
    p = JsonSchema(schema, spelling="any")
    assert await p.complete(list(b"[1, 2]")) == 0.0
    assert await p.complete(list(b'["a"]')) == float("-inf")
    same = {**schema, "items": {"$ref": "https://ex.com/dir/s.json#/$defs/n"}}
    assert await JsonSchema(same, spelling="any").complete(list(b"[3]")) == 0.0


def test_the_validators_registry_refuses_to_retrieve():
    from referencing.exceptions import Unresolvable

    from genlm.control.constraints.json_schema._json_schema import Compiler

    check = Compiler({"type": "integer"}).validator.evolve(schema={"$ref": "http://127.0.0.1:9/x.json"})
    with pytest.raises(Unresolvable) as info:
        check.is_valid(1)
    cause = info.value
    while cause.__cause__ is not None:
        cause = cause.__cause__
    assert "does not retrieve 'http://127.0.0.1:9/x.json'" in str(cause)


@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("spelling", ["canonical", "any"])
def test_a_key_name_of_thousands_of_characters_is_served_without_recursion(spelling, closed):
    """The compiled engine's writer nests one regex group per character of a declared
    key name in the regex of the other keys; a name over `MAX_KEY_CHARS` characters is
    left to the generic path, which reads it byte by byte (5,000 characters in an
    object that allows other keys raised RecursionError in the writer)."""
    import asyncio

    import numpy as np

    from genlm.control import PromptedLLM
    from genlm.control.engine._write_json import MAX_KEY_CHARS

    name = "k" * 5000
    assert len(name) > MAX_KEY_CHARS
    spec = {"type": "object", "properties": {name: {"type": "string"}}, "required": [name]}
    schema = JsonSchema({**spec, "additionalProperties": not closed}, spelling=spelling)
    llm = PromptedLLM.from_name("embedded", backend="hf")
    condition = schema.coerce(llm, f=b"".join)
    row = asyncio.run(condition.logw_next(llm.tokenize('{"kkk'))).weights
    allowed = {bytes(llm.vocab[i]) for i in np.flatnonzero(row[:-1] > float("-inf"))}
    # the name goes on (in the default spelling an escape may spell its next `k`); it
    # ends 4,997 characters early only as another key, where other keys are allowed
    assert b"k" in allowed
    assert (b'"' in allowed) == (not closed)
    if closed:
        assert allowed == ({b"k"} if spelling == "canonical" else {b"k", b"\\"})
    document = ('{"' + name + '":"x"}').encode()
    assert asyncio.run(schema.complete(list(document))) == 0.0
    assert asyncio.run(schema.complete(list(document.replace(b"k", b"j", 1)))) == float("-inf")
