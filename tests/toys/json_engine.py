"""The compiled engine's JSON language read byte by byte, for comparing it with `JsonSchema`.

The engine runs over a vocabulary of the 256 single bytes (and EOS), so its
answers on a byte string are its language's, free of any LLM tokenizer.
"""

from __future__ import annotations

import random

import llguidance as llg
import numpy as np

from genlm.control import JsonSchema
from genlm.control.engine._guided_engine import _ByteTokens, grammar_text

EOS_ID = 256
_TOKENIZER = []


def byte_tokenizer():
    if not _TOKENIZER:
        tokens = [bytes([i]) for i in range(256)] + [b""]
        wrapper = llg.TokenizerWrapper(_ByteTokens(tokens, EOS_ID))
        _TOKENIZER.append(llg.LLTokenizer(wrapper, eos_token=[EOS_ID]))
    return _TOKENIZER[0]


class EngineBytes:
    """The engine's matcher for `schema` over single bytes."""

    def __init__(self, schema):
        self.grammar = grammar_text("json_schema", schema)
        self.root = llg.LLMatcher(byte_tokenizer(), self.grammar, log_level=0)
        assert not self.root.is_error(), self.root.get_error()

    def after(self, doc: bytes):
        """The matcher after `doc` (None: a byte was refused)."""
        m = self.root.deep_copy()
        for b in doc:
            if not m.consume_token(b):
                return None
        return m

    def prefix(self, doc: bytes) -> bool:
        return self.after(doc) is not None

    def complete(self, doc: bytes) -> bool:
        m = self.after(doc)
        return m is not None and m.is_accepting()


class RecognizerBytes:
    """`JsonSchema(schema, spelling=spelling)` answering the same two questions
    synchronously (the spelling "any", RFC 8259's, unless told)."""

    def __init__(self, schema, spelling: str = "any"):
        self.p = JsonSchema(schema, spelling=spelling)

    def prefix(self, doc: bytes) -> bool:
        return self.p.state(list(doc)) is not None

    def complete(self, doc: bytes) -> bool:
        q = self.p.state(list(doc))
        return q is not None and self.p.transitions.accepts(q)


def first_disagreement(schema, alphabet: bytes, max_len: int, limit: int = 50_000):
    """The first byte string (depth first over `alphabet`, up to `max_len` bytes) on
    which the engine and `JsonSchema` disagree about being a prefix or a complete
    document, as `(doc, what, engine, recognizer)`; None if they agree on every
    string the engine keeps alive (at most `limit` of them are expanded).

    Both sides carry their state down the tree: a matcher copy per expanded string,
    the recognizer's interned state per byte."""
    return short_string_disagreement((EngineBytes(schema), JsonSchema(schema, spelling="any")),
                                     alphabet, max_len, limit)


class GrammarBytes:
    """The engine's matcher for the grammar `_write_json` writes from `schema` in a
    JSON spelling, over single bytes."""

    def __init__(self, schema, spelling: str = "any"):
        from genlm.control.engine._translate import _write_json

        text = _write_json(schema, spelling)
        assert isinstance(text, str), text
        self.root = llg.LLMatcher(byte_tokenizer(), grammar_text("lark", text), log_level=0)
        assert not self.root.is_error(), self.root.get_error()


def short_string_disagreement(pair, alphabet: bytes, max_len: int, limit: int = 50_000):
    """`first_disagreement` for a pair `(engine matcher holder, JsonSchema)`."""
    eng, js = pair
    stack = [(b"", eng.root, js.state_of([]))]
    expanded = 0
    while stack:
        doc, m, q = stack.pop()
        e, r = m.is_accepting(), js.transitions.accepts(q)
        if e != r:
            return doc, "complete", e, r
        if len(doc) == max_len:
            continue
        expanded += 1
        assert expanded <= limit, f"more than {limit} live strings: shorten max_len"
        for b in alphabet:
            e_live = m.validate_tokens([b]) == 1
            q2 = js.advance(q, b)
            if e_live != (q2 is not None):
                return doc + bytes([b]), "prefix", e_live, q2 is not None
            if e_live:
                m2 = m.deep_copy()
                m2.consume_token(b)
                stack.append((doc + bytes([b]), m2, q2))
    return None


def disagreement_along(schema_pair, doc: bytes):
    """The first prefix of `doc` (or `doc` itself, as complete) on which the engine
    and the recognizer of `schema_pair = (EngineBytes, JsonSchema)` disagree, as
    `(prefix, what)`; None if they agree all along. Returns whether `doc` is valid too."""
    eng, js = schema_pair
    m, q = eng.root.deep_copy(), js.state_of([])
    for i, b in enumerate(doc):
        e_live = m.validate_tokens([b]) == 1
        q = js.advance(q, b)
        if e_live != (q is not None):
            return doc[: i + 1], "prefix"
        if not e_live:
            return None
        m.consume_token(b)
    if m.is_accepting() != js.transitions.accepts(q):
        return doc, "complete"
    return None


async def random_completion(p: JsonSchema, ctx: list, rng, steps: int, close_bias: float):
    """A random completion of the byte context `ctx` drawn among the bytes `p` allows
    (a closing byte with probability `close_bias` when one is allowed, else a printable
    one); None if none ends within `steps` bytes."""
    ctx = list(ctx)
    for _ in range(steps):
        row = (await p.logw_next(ctx)).weights
        if row[-1] == 0.0:
            return bytes(ctx)
        allowed = np.flatnonzero(row[:-1] == 0.0).tolist()
        assert allowed, f"live context {bytes(ctx)!r} with no continuation"
        closers = [b for b in allowed if b in b'"}]']
        printable = [b for b in allowed if 0x20 < b < 0x7F] or allowed
        ctx.append(rng.choice(closers) if closers and rng.random() < close_bias else rng.choice(printable))
    return None


# Bytes a mutation inserts or writes: JSON's structure, digits, letters of its
# keywords, whitespace, an escape, and UTF-8 lead and invalid bytes.
MUTATION_BYTES = list(b'{}[]",:0123456789.-eE+ abctrunlfsx\\\n') + [0xC3, 0xA9, 0xFF]


def mutate(doc: bytes, rng: random.Random) -> bytes:
    data = bytearray(doc)
    for _ in range(rng.randint(1, 3)):
        op, i = rng.randrange(3), rng.randint(0, len(data))
        if op == 0:
            data.insert(i, rng.choice(MUTATION_BYTES))
        elif data and i < len(data):
            if op == 1:
                del data[i]
            else:
                data[i] = rng.choice(MUTATION_BYTES)
    return bytes(data)
