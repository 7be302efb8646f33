"""`JsonSchema` behaviours that genlm-control 0.4.1 code relies on (issue 23), and the
differences from 0.4.1 that we keep because they are what JSON defines.

Checked here: the formats `relative-json-pointer` (exact on prefixes),
`idn-hostname` and `regex` (on whole documents, as `jsonschema` checks them); an
invalid schema raising an error that is both a `ValueError` and 0.4.1's
`jsonschema.SchemaError`; the `validate=` keyword. Kept as ours (docs/compat-041.md,
"Differences from 0.4.1"): any amount of JSON whitespace between tokens, and
repeated keys that `jsonschema` validates. 0.4.1's documents (`json.dumps` with its
default separators and ASCII escapes) are those of `spelling="any"`, which every
test here names (it is also the default).
"""

import asyncio
import itertools
import json

import jsonschema
import pytest
from jsonschema.exceptions import SchemaError

from genlm.control import JsonSchema

NEG_INF = float("-inf")


def run(coro):
    return asyncio.run(coro)


def prefix(p, text: bytes) -> float:
    return run(p.prefix(list(text)))


def complete(p, text: bytes) -> float:
    return run(p.complete(list(text)))


def eos_weight(p, text: bytes) -> float:
    return run(p.logw_next(list(text)))[p.eos]


def reference(schema):
    """Whether `jsonschema`, with its format checker, accepts a document's text."""
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return lambda text: validator.is_valid(json.loads(text))


# relative-json-pointer -------------------------------------------------------


def is_relative_pointer(s: str) -> bool:
    """draft-handrews-relative-json-pointer-01: a non-negative integer without leading
    zeros, then "#" or a JSON pointer ("/"-separated, "~" only as "~0" or "~1")."""
    digits = len(s) - len(s.lstrip("0123456789"))
    number, rest = s[:digits], s[digits:]
    if not number or (len(number) > 1 and number[0] == "0"):
        return False
    if rest == "#":
        return True
    if rest and rest[0] != "/":
        return False
    return all(t[i + 1:i + 2] in ("0", "1") for t in rest.split("/") for i, c in enumerate(t) if c == "~")


ALPHABET = "01#/~a"


def strings(max_len: int):
    for n in range(max_len + 1):
        for chars in itertools.product(ALPHABET, repeat=n):
            yield "".join(chars)


def test_relative_json_pointer_is_exact_on_complete_documents():
    p = JsonSchema({"type": "string", "format": "relative-json-pointer"}, spelling="any")
    assert p.superset_keywords == frozenset()
    accepted = 0
    for s in strings(4):
        got = complete(p, json.dumps(s).encode())
        assert got == (0.0 if is_relative_pointer(s) else NEG_INF), s
        accepted += got == 0.0
    assert accepted > 20  # the enumeration holds valid pointers as well as invalid ones


def test_relative_json_pointer_is_exact_on_prefixes():
    """A string prefix is live iff some completion is a relative JSON pointer (two more
    characters witness every live prefix over this alphabet)."""
    p = JsonSchema({"type": "string", "format": "relative-json-pointer"}, spelling="any")
    for s in strings(3):
        live = any(is_relative_pointer(s + tail) for tail in strings(2))
        assert prefix(p, b'"' + s.encode()) == (0.0 if live else NEG_INF), s


def test_relative_json_pointer_0_4_1_cases():
    p = JsonSchema({"format": "relative-json-pointer", "type": "string"}, spelling="any")
    assert complete(p, b'"hello world"') == NEG_INF
    assert prefix(p, b'"h') == NEG_INF  # refused on the prefix already
    for good in (b'"0"', b'"1#"', b'"10/a~1b/~0"', b'"0/"'):
        assert complete(p, good) == 0.0, good
    for bad in (b'"01"', b'"-1"', b'""', b'"#"', b'"0/~2"', b'"0#/a"'):
        assert complete(p, bad) == NEG_INF, bad


# idn-hostname and regex: checked on the whole document --------------------------

IDN_CASES = ["hello world", "example.com", "Example.com", "öbb.at", "xn--bb-eka.at",
             "a_b", "-a.com", "a-.com", "ex..com", "ex.com.", "", ".", "a" * 63, "a" * 64,
             "例え.テスト", "a\u200db.com", "l·l.cat", "1.2.3.4"]

REGEX_CASES = ["[", "a+", "(a", "a)", "(?P<x>a)(?P=x)", "\\d{2,3}", "*a", "a**", "[a-",
               "(?<=a)b", "\\", "(?i)x", "", "^$", "a{2,1}", "(?P<1>a)"]


@pytest.mark.parametrize("fmt, cases", [("idn-hostname", IDN_CASES), ("regex", REGEX_CASES)])
def test_document_formats_agree_with_jsonschema(fmt, cases):
    schema = {"type": "string", "format": fmt}
    p, ok = JsonSchema(schema, spelling="any"), reference(schema)
    assert p.superset_keywords == {"format"}
    verdicts = set()
    for s in cases:
        text = json.dumps(s).encode()
        want = 0.0 if ok(text) else NEG_INF
        verdicts.add(want)
        assert complete(p, text) == want, s
        assert eos_weight(p, text) == want, s  # EOS in the row agrees with complete
        # a superset on prefixes: no prefix of a document is refused
        assert all(prefix(p, text[:i]) == 0.0 for i in range(len(text) + 1)), s
    assert verdicts == {0.0, NEG_INF}


def test_0_4_1_format_cases():
    idn = JsonSchema({"format": "idn-hostname", "type": "string"}, spelling="any")
    assert complete(idn, b'"hello world"') == NEG_INF
    assert complete(idn, '"öbb.at"'.encode()) == 0.0
    rx = JsonSchema({"format": "regex", "type": "string"}, spelling="any")
    assert complete(rx, b'"["') == NEG_INF
    assert complete(rx, b'"[a]"') == 0.0


def test_document_format_inside_an_object_and_beside_other_keywords():
    schema = {"type": "object", "properties": {"host": {"type": "string", "format": "idn-hostname"},
                                                "rx": {"type": "string", "format": "regex", "maxLength": 3}},
              "required": ["host"]}
    p, ok = JsonSchema(schema, spelling="any"), reference(schema)
    for doc in (b'{"host": "example.com"}', b'{"host": "a b"}', b'{"host": "x", "rx": "("}',
                b'{"host": "x", "rx": "a+"}', b'{"host": "x", "rx": "a+++"}'):
        assert complete(p, doc) == (0.0 if ok(doc) else NEG_INF), doc
    assert prefix(p, b'{"host": "x", "rx": "abcd') == NEG_INF  # maxLength stays exact


def test_a_regex_too_deep_to_compile_is_no_crash():
    p = JsonSchema({"type": "string", "format": "regex"}, spelling="any")
    deep = ("(" * 3000 + ")" * 3000).encode()
    assert complete(p, b'"' + deep + b'"') in (0.0, NEG_INF)


def test_format_regex_in_enum_filters_the_values():
    p = JsonSchema({"enum": ["[", "a+", 3], "format": "regex"}, spelling="any")
    assert complete(p, b'"["') == NEG_INF
    assert complete(p, b'"a+"') == 0.0
    assert complete(p, b"3") == 0.0  # a format constrains strings only


# errors and keywords -------------------------------------------------------------


def test_invalid_schema_is_both_value_error_and_schema_error():
    for schema in ({"type": "float"}, {"minLength": -1}, {"properties": {"a": 3}}):
        with pytest.raises(SchemaError) as caught:
            JsonSchema(schema, spelling="any")
        assert isinstance(caught.value, ValueError)
        assert "invalid JSON schema at '#/" in str(caught.value)
    with pytest.raises(ValueError, match="#/type"):
        JsonSchema({"type": "float"}, spelling="any")
    with pytest.raises(jsonschema.SchemaError) as caught:
        JsonSchema({"type": "object", "properties": {"a": {"type": "float"}}}, spelling="any")
    assert list(caught.value.path) == ["properties", "a", "type"]


def test_errors_that_are_not_metaschema_errors_stay_value_errors():
    with pytest.raises(ValueError) as caught:
        JsonSchema({"$ref": "http://example.com/schema.json"}, spelling="any")
    assert not isinstance(caught.value, SchemaError)


def test_validate_keyword_is_accepted():
    schema = {"type": "array", "items": {"type": "integer"}}
    p, q = JsonSchema(schema, validate=False, spelling="any"), JsonSchema(schema, validate=True, spelling="any")
    for text in (b"[", b"[1, 2]", b"[1.5]", b'["a"]'):
        assert prefix(p, text) == prefix(q, text)
        assert complete(p, text) == complete(q, text)
    with pytest.raises(SchemaError):  # compiling needs a valid schema either way
        JsonSchema({"type": "float"}, validate=False, spelling="any")


# differences from 0.4.1 that are JSON itself -------------------------------------


@pytest.mark.parametrize("schema, text", [
    ({}, b"\n\n\n"), ({}, b"\n    \n"), ({"type": "object"}, b"{\n\n"), ({"type": "object"}, b"{\n  \n"),
    ({"type": "object"}, b" " * 40),
])
def test_any_amount_of_whitespace_between_tokens(schema, text):
    """RFC 8259: whitespace (space, tab, LF, CR) is allowed in any amount around
    tokens; 0.4.1 refused some runs of it."""
    p = JsonSchema(schema, spelling="any")
    assert prefix(p, text) == 0.0
    doc = text + (b"}" if text.startswith(b"{") else b"{}") + b"\n\n \t\r\n"
    json.loads(doc)
    assert complete(p, doc) == 0.0


def test_json_whitespace_after_a_value():
    p = JsonSchema({"type": "array", "items": {"type": "integer"}}, spelling="any")
    row = run(p.logw_next(list(b"[0]")))
    live = {k for k in range(128) if row[k] == 0.0}
    assert live == set(b" \t\n\r")
    assert row[p.eos] == 0.0
    assert complete(p, b"[0]\t\r\n ") == 0.0


def test_repeated_keys_follow_jsonschema():
    """JSON Schema leaves repeated keys undefined and `jsonschema` validates the last
    value of each; a repeat that the validator accepts is accepted (0.4.1 refused
    every repeat), and a repeat of a key the schema names is refused."""
    schema = {"type": "object"}
    p, ok = JsonSchema(schema, spelling="any"), reference(schema)
    doc = b'{"data": 1.0, "data": 2}'
    assert ok(doc)
    assert prefix(p, b'{"data": 1.0, "data"') == 0.0
    assert complete(p, doc) == 0.0
    named = JsonSchema({"type": "object", "properties": {"data": {"type": "number"}}}, spelling="any")
    assert prefix(named, b'{"data": 1.0, "data"') == NEG_INF
