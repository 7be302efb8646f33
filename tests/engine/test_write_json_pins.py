"""The JSON grammar writer's text around the surrogates, pinned: the text each schema
was written as before the surrogate range was one constant (`_write_json_strings.SURROGATES`),
so the languages of these surrogate-adjacent classes, enums and keys are byte-identical."""

import hashlib
import json

import pytest

from genlm.control.constraints.json_schema import compile_schema
from genlm.control.engine._write_json import schema_grammar
from genlm.control.engine._write_json_strings import SURROGATES

# (schema as JSON text, length of its grammar, sha256 of its grammar)
PINNED = [
    (
        '{"enum": ["\\ud7ff", "\\ue000", "a\\ud7fe\\ue001"]}',
        175,
        "de52d73996c0eed08d2f081b506940908ecdc81552e9d410b7ecda11305fcf2b",
    ),
    (
        '{"type": "object", "properties": {"\\ud7ff": {"type": "null"}, "\\ue000": {"type": "null"}}, "additionalProperties": {"type": "null"}}',
        1769,
        "57b819db90687c6b8dec08f630d1a2fa005420c9cbb5012bf76a794528369b7a",
    ),
    (
        '{"type": "object", "properties": {"\\ud7ffx": {"type": "null"}}, "additionalProperties": {"type": "boolean"}}',
        1556,
        "1c167f8678e45affd3405529b2c743dc849390c07ef6e525c6b96bfb594e7c4f",
    ),
    (
        '{"type": "string", "maxLength": 2}',
        235,
        "ebf9e3f1dcab6960ebdaf768409b804c53daf9483c7545e89c401e63fa65bd4c",
    ),
    (
        '{"type": "string", "pattern": "^.$"}',
        650,
        "4aede27ee2277ded816f7dc1af11b3dce97327ab634898d8832d6d3f2d0af0c9",
    ),
    (
        '{"type": "string", "pattern": "^[\\\\ud7ff-\\\\ue000]$"}',
        136,
        "d24b5905d1ebc5a81ac362184449feaeeffa54300aeffaa2621ca6355a3ce98e",
    ),
    (
        '{"type": "string", "pattern": "^[\\ud000-\\ud7ff\\ue000-\\uefff]$"}',
        200,
        "6ecbd570da313b85e16d9fd8947999d680e7838b26d129f994919b534f44ec69",
    ),
    (
        '{"type": "string", "pattern": "^[\\ud7f0-\\ue010]+$"}',
        198,
        "4438fb00e76bd0e9fb8e17315601cfd5d4abdff61372e71afc494d4c2113889a",
    ),
    (
        '{"type": "string", "pattern": "^[^\\ud7ff\\ue000]*$"}',
        732,
        "99718b2cf04a0d0e317ee1367a0e685bc369861fba58af31eb222620c76c7377",
    ),
]


@pytest.mark.parametrize("schema, length, digest", PINNED)
def test_the_grammar_text_is_pinned(schema, length, digest):
    text = schema_grammar(compile_schema(json.loads(schema)).root).grammar
    assert (len(text), hashlib.sha256(text.encode()).hexdigest()) == (length, digest)


def test_surrogates_are_the_utf16_surrogate_code_points():
    assert (SURROGATES.start, SURROGATES.stop - 1) == (0xD800, 0xDFFF)
    assert 0xD7FF not in SURROGATES and 0xE000 not in SURROGATES
