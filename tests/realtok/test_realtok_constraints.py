"""Constraints over real vocabularies: `CanonicalTokenization` on canonical and
non-canonical encodings, and the compiled engine's regex, Lark and JSON coercions
pinned to the generic coercions (byte automaton, Earley, JSON machine) along token
paths, as `tests/engine/test_engine_exact.py` pins them on the embedded model."""

import asyncio
import random

import numpy as np
import pytest
from toys.realtok_checks import random_texts

from genlm.control import BoolCFG, BoolFSA, CanonicalTokenization, JsonSchema
from genlm.control.engine.guided import GuidedCoerced
from genlm.control.potential.coerce import Coerced
from genlm.control.weights import NEG_INF

pytest.importorskip("llguidance")

_CANONICAL: dict = {}


def canonical(llm) -> CanonicalTokenization:
    if id(llm) not in _CANONICAL:
        _CANONICAL[id(llm)] = CanonicalTokenization.from_llm(llm)
    return _CANONICAL[id(llm)]


def run(coro):
    return asyncio.run(coro)


def test_canonical_encodings_of_random_text_are_accepted(real_llm):
    """Every prefix of the tokenizer's encoding passes `prefix`, the whole passes
    `complete`, and each next token is in the row of the prefix before it."""
    c = canonical(real_llm)
    for text in random_texts(12, seed=2):
        toks = real_llm.tokenize(text)
        assert run(c.complete(toks)) == 0.0, repr(text)
        for k in range(len(toks)):
            assert run(c.prefix(toks[: k + 1])) == 0.0, (repr(text), k)
            row = run(c.logw_next(toks[:k])).weights
            assert row[c.positions([toks[k]])[0]] == 0.0, (repr(text), k)


def test_a_non_canonical_split_is_rejected(real_llm, first_token):
    """Text spelled one byte token at a time is not canonical; splitting a two-byte
    character into its bytes is refused already by `prefix` on the byte-level BPE
    (no pre-token boundary falls inside a character, and its merges join them)."""
    c = canonical(real_llm)
    text = "hello world"
    split = [first_token[bytes([b])] for b in text.encode()]
    assert run(c.complete(split)) == NEG_INF
    assert run(c.complete(real_llm.tokenize(text))) == 0.0
    e_acute = [first_token[b"\xc3"], first_token[b"\xa9"]]
    assert run(c.complete(e_acute)) == NEG_INF
    if c.bpe is not None:  # the byte-level BPE (tekken)
        assert c.bpe.whole_tokens
        assert run(c.prefix(e_acute)) == NEG_INF


def test_spm_byte_fallback_is_canonical_only_where_no_piece_has_the_bytes(spm_llm):
    """The SentencePiece vocabulary spells a character without a piece by its bytes
    (`<0xNN>`): that encoding is canonical; the byte tokens for a character that has a
    piece are not, though they spell the same bytes."""
    c = canonical(spm_llm)
    decode, tok = spm_llm.token_maps.decode, spm_llm.model.tokenizer
    rare = "\u2fd5"  # a Kangxi radical with no piece of its own
    toks = spm_llm.tokenize(rare)
    assert [t.token_id for t in toks] == [3 + b for b in rare.encode()]
    assert run(c.complete(toks)) == 0.0
    piece = tok.convert_tokens_to_ids("é")
    assert run(c.complete([decode[piece]])) == 0.0
    assert run(c.complete([decode[3 + 0xC3], decode[3 + 0xA9]])) == NEG_INF


# The engine pinned to the generic coercions ------------------------------------

REGEXES = [r" (a|an|the)( (a|an|the)){0,2}\.", r"[éü€]+ \w{2}", r"\d+(\.\d*)?\n", r"(?i)select [a-z]+"]
# NAME is one or two letters: the generic (Earley) coercion's row after `let` walks every
# token that can spell spaces and a NAME, which for /[a-z]+/ is most of a 131k vocabulary
# (minutes on a CPU); the keyword, ignored spaces, lexeme bounds and rejections stay pinned.
LARK = 'start: "let" NAME "=" NUMBER\nNAME: /[a-z]{1,2}/\nNUMBER: /[0-9]+/\n%ignore " "'
SCHEMA = {"type": "array", "items": {"type": "integer"}}
SAMPLES = {
    0: [" the a.", " an", " the the the.", " a b"],
    1: ["éü ab", "€ x1", "é", "ü€é  z"],
    2: ["12.5\n", "3", "7.\n", "1 2"],
    3: ["SELECT abc", "select x", "Select"],
    "lark": ["let x = 12", "let  yy=3", "let", "let x", "letx=1", "let a = b", "let xyz=1"],
    "json": ["[1, 2, -3]", "[ ]", "[1,", "[1.5]", " [7] "],
}


def token_paths(llm, first_token, text: str, rng: random.Random) -> list[list]:
    """The canonical encoding of `text`, and a random split of it into tokens."""
    data, cuts = text.encode(), sorted(rng.sample(range(len(text.encode()) + 1), min(3, len(text) + 1)))
    bounds = sorted({0, len(data), *cuts})
    split = []
    for a, b in zip(bounds, bounds[1:]):
        part = data[a:b]
        split += [first_token[part]] if part in first_token else [first_token[bytes([x])] for x in part]
    return [llm.tokenize(text), split]


def assert_agree_along(engine, generic, path: list) -> None:
    for k in range(len(path) + 1):
        p = run(generic.prefix(path[:k]))
        assert run(engine.prefix(path[:k])) == p, k
        assert run(engine.complete(path[:k])) == run(generic.complete(path[:k])), k
        if p == NEG_INF:
            return
    assert_same_rows(engine, run(engine.logw_next(path)), generic, run(generic.logw_next(path)))


def assert_same_rows(engine, a, generic, b) -> None:
    """Rows over two vocabularies (a pruned coercion holds only the tokens its
    alphabet can spell; the others weigh zero) equal token by token."""
    lookup = engine.tables.lookup
    at = np.fromiter((lookup[t] for t in generic.vocab_eos), dtype=np.intp, count=len(generic.vocab_eos))
    full = np.full(len(engine.vocab_eos), NEG_INF)
    full[at] = b.weights
    np.testing.assert_array_equal(a.weights, full)


_TRIES: dict = {}


def pair(llm, source, kind: str):
    """(engine coercion, generic coercion) of a regex, Lark grammar or JSON schema; the
    generic coercions over one model share one token trie."""
    if id(llm) not in _TRIES:
        _TRIES[id(llm)] = Coerced.build_trie(llm.vocab, b"".join)
    trie = _TRIES[id(llm)]
    p = {"regex": BoolFSA.from_regex, "lark": BoolCFG.from_lark, "json": JsonSchema}[kind](source)
    return p.coerce(llm, f=b"".join), p.coerce(llm, f=b"".join, engine=False, trie=trie)


@pytest.mark.parametrize(
    "grammar, key", [("regex", i) for i in range(len(REGEXES))] + [("lark", "lark"), ("json", "json")]
)
def test_engine_coercion_equals_generic_coercion(real_llm, first_token, grammar, key):
    """Rows (at the end of each live path), `prefix` and `complete` equal exactly."""
    source = {"regex": REGEXES[key] if grammar == "regex" else None, "lark": LARK, "json": SCHEMA}[grammar]
    engine, generic = pair(real_llm, source, grammar)
    assert isinstance(engine, GuidedCoerced) and not isinstance(generic, GuidedCoerced)
    rng = random.Random(str(key))
    for text in SAMPLES[key]:
        for path in token_paths(real_llm, first_token, text, rng):
            assert_agree_along(engine, generic, path)
    # the rows at the start: every token the constraint allows first, duplicates included
    a = run(engine.logw_next([]))
    assert_same_rows(engine, a, generic, run(generic.logw_next([])))
    assert (a.weights == 0).any()
