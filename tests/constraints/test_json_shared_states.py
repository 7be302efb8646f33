"""An unbounded number's frame keeps the shape of its prefix, not its text
(`_json_number.number_shape`), and an array without `maxItems` stops counting its
items past `minItems` and its fixed items (`_json_machine._counted`): numbers of one
shape, and arrays that differ only in how many items they hold past that, are one
recognizer state. Both must leave the language as it was: the next bytes and
completeness of every prefix, and every document's acceptance, are those of the
recognizer that keeps the whole text and the whole count; a bounded number or a list
of values keeps its text, an array with `maxItems` its count."""

import asyncio

import numpy as np
import pytest

from genlm.control import JsonSchema
from genlm.control.constraints.json_schema import _json_machine
from genlm.control.constraints.json_schema._json_nodes import Num
from genlm.control.constraints.json_schema._json_number import (
    Bounds,
    is_complete,
    number_shape,
    reachable,
    spelling_step,
)

ALPHABET = "-+.eE0159"


@pytest.mark.parametrize("integer", [False, True])
def test_a_prefix_and_its_shape_continue_and_end_alike(integer):
    """Every number prefix of up to 6 characters over `-+.eE0159`: the prefix and its
    shape allow the same next characters, are complete alike, are both reachable,
    and the shape of a step is the shape of the shape's step."""
    num = Num(integer, Bounds())
    level, checked = [""], 0
    for _ in range(6):
        grown = []
        for text in level:
            shape = number_shape(text)
            assert len(shape) <= 7
            assert is_complete(text) == is_complete(shape), (text, shape)
            assert not text or (reachable(text, num) and reachable(shape, num))
            for c in ALPHABET:
                ok = spelling_step(text, ord(c), integer)
                assert ok == spelling_step(shape, ord(c), integer), (text, shape, c)
                if ok:
                    assert number_shape(shape + c) == number_shape(text + c), (text, c)
                    grown.append(text + c)
                    checked += 1
        level = grown
    assert checked > (1000 if integer else 20000)


def test_shapes_of_examples():
    assert number_shape("-120.50E-7") == "-1.0e+0"
    assert number_shape("0") == "0"
    assert number_shape("-0") == "-0"
    assert number_shape("10") == "1"
    assert number_shape("3.") == "1."
    assert number_shape("3e") == "1e"
    assert number_shape("3E7") == "1e0"
    assert number_shape("") == ""
    assert number_shape("-") == "-"


SCHEMAS = [
    {"type": "number"},
    {"type": "integer"},
    {"type": "array", "items": {"type": "number"}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "object"},  # numbers among the other values of open objects
    {"type": "integer", "maximum": 100},
    {"type": "number", "minimum": -2.5, "exclusiveMaximum": 9007199254740993},
    {"enum": [12, 1.5e3, -7]},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 5}, {"type": "number"}]}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "minItems": 1},
    {"type": "array", "prefixItems": [{"type": "integer"}], "items": False},
    {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 1}},
]
BYTES = b'0123456789-+.eE[]{},:"a '
EDGES = [
    str(2**53), str(2**53 + 1), str(2**63), str(-(2**63) - 1), "1e308", "1.7976931348623157e308",
    "1e309", "-0.0e-0", "12e+0", "100", "101", "1500", "1.5e3", "-7", "0.5E-400",
]


def _texts(rng: np.random.Generator) -> list[bytes]:
    out = [e.encode() for e in EDGES]
    out += [b"[" + e.encode() + b"," + e.encode() + b"]" for e in EDGES]
    out += [b'{"a":' + e.encode() + b"}" for e in EDGES]
    for n in range(6):  # arrays of 0 to 5 items, flat and nested
        out.append(b"[" + b",".join([b"1"] * n) + b"]")
        out.append(b"[" + b",".join([b"true"] * n) + b"]")
        out.append(b"[1,true" + b",2" * n + b"]")
        out.append(b"[" + b",".join([b"[1,2]"] * n) + b"]")
        out.append(b"[" + b",".join([b"[]"] * n) + b"]")
    for _ in range(300):
        n = int(rng.integers(1, 14))
        out.append(bytes(rng.choice(list(BYTES), size=n).tolist()))
    return out


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: str(s)[:40])
def test_the_language_is_that_of_the_recognizer_keeping_the_text(schema, monkeypatch):
    """At every prefix of 350 texts (random bytes of JSON numbers and structure, and
    numbers near 2**53, 2**63 and 10**308), `prefix` and `complete` equal those of a
    recognizer whose number frames keep their whole text."""
    rng = np.random.default_rng(7)
    texts = _texts(rng)
    prefixes = sorted({t[:k] for t in texts for k in range(len(t) + 1)})

    def read(potential):
        async def go():
            return [
                (await potential.prefix(list(p)), await potential.complete(list(p))) for p in prefixes
            ]

        return asyncio.run(go())

    shaped = read(JsonSchema(schema))
    with monkeypatch.context() as m:
        m.setattr(_json_machine, "_kept", lambda text, num: text)
        m.setattr(_json_machine, "_counted", lambda frame: frame.count + 1)
        whole = read(JsonSchema(schema))
    assert shaped == whole
    assert sum(c == 0.0 for _, c in shaped) >= 2  # some documents are accepted


def test_arrays_past_their_least_count_are_one_state_and_bounded_ones_are_not():
    free = JsonSchema({"type": "array", "items": {"type": "integer"}, "minItems": 2})
    assert free.state(list(b"[1,2,")) == free.state(list(b"[1,2,3,4,5,")) is not None
    assert free.state(list(b"[1,")) != free.state(list(b"[1,2,"))
    # the least count is still read: `[1]` is no document
    assert asyncio.run(free.complete(list(b"[1]"))) == float("-inf")
    assert asyncio.run(free.complete(list(b"[1,2,3,4,5]"))) == 0.0
    bounded = JsonSchema({"type": "array", "items": {"type": "integer"}, "maxItems": 3})
    assert bounded.state(list(b"[1,2,")) != bounded.state(list(b"[1,"))
    assert bounded.state(list(b"[1,2,3,")) is None


def test_numbers_of_one_shape_are_one_state_and_bounded_ones_are_not():
    free = JsonSchema({"type": "array", "items": {"type": "integer"}})
    assert free.state(list(b"[12")) == free.state(list(b"[987654321")) is not None
    assert free.state(list(b"[1")) != free.state(list(b"[0"))
    bounded = JsonSchema({"type": "array", "items": {"type": "integer", "maximum": 100}})
    assert bounded.state(list(b"[12")) != bounded.state(list(b"[5"))
    assert bounded.state(list(b"[101")) is None
    assert bounded.state(list(b"[100")) is not None
