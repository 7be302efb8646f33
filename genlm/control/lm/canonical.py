"""`CanonicalTokenization`: token sequences that are the tokenizer's own encoding of their bytes."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import regex

from genlm.control._state_cache import RowCache
from genlm.control.lm._text_encoding import component_spec, continuation_encoder
from genlm.control.potential.base import Potential, SparseLogws
from genlm.control.potential.tables import VocabTables
from genlm.control.weights import NEG_INF, LazyWeights


def _text(data: bytes) -> str | None:
    """`data` as UTF-8 text, or None when it is not valid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def byte_alphabet() -> list[str]:
    """The byte-level BPE alphabet: the character that stands for each byte value.

    Printable Latin-1 bytes stand for themselves; the other bytes, in order, for
    the characters from U+0100 on.
    """
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(0x100 + extra))
            extra += 1
    return out


class ByteBPE:
    """The tokenizer's BPE merges applied to a whole byte string, without pre-tokenization.

    Available for byte-level BPE tokenizers (GPT-2 style `tokenizer.json`); `of(tokenizer)`
    returns None for others. A tokenizer that first looks a whole pre-token up in its
    vocabulary (`ignore_merges`: Llama 3, tiktoken-style BPEs such as Mistral's tekken)
    merges any other pre-token; here merges are always applied, and `whole_tokens` says
    that a token may also stand for a pre-token of its own, whatever its merges give.
    """

    def __init__(self, backend: Any, gpt2_regex: bool, whole_tokens: bool = False):
        self._bpe = backend
        self.gpt2_regex = gpt2_regex
        self.whole_tokens = whole_tokens
        self._alphabet = byte_alphabet()
        self._batch = getattr(backend, "encode_batch_fast", None) or backend.encode_batch

    @classmethod
    def of(cls, tokenizer: Any) -> "ByteBPE | None":
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return None
        from tokenizers import Tokenizer

        # The components are read one by one: serialising the whole tokenizer (its
        # vocabulary and merges) is paid once, for the copy, and only when it is needed.
        pre = component_spec(backend.pre_tokenizer) or {}
        steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
        byte_level = any(step.get("type") == "ByteLevel" for step in steps)
        if type(backend.model).__name__ != "BPE" or not byte_level:
            return None
        if backend.normalizer is not None:
            return None
        whole = bool(getattr(backend.model, "ignore_merges", False))
        bpe = Tokenizer.from_str(backend.to_str())
        bpe.pre_tokenizer = None
        if whole:
            bpe.model.ignore_merges = False
        gpt2 = pre.get("type") == "ByteLevel" and pre.get("use_regex", True)
        return cls(bpe, gpt2_regex=bool(gpt2), whole_tokens=whole)

    def encode_batch(self, data: Sequence[bytes]) -> list[list[int]]:
        """The BPE token ids of each byte string (merges by rank over its bytes)."""
        texts = ["".join(self._alphabet[b] for b in d) for d in data]
        return [e.ids for e in self._batch(texts, add_special_tokens=False)]


# Character classes of the GPT-2 pre-tokenizer, for `boundary_possible`.
MID, SPACE, WS, LETTER, CONTRACTION_END, DIGIT, OTHER, UNKNOWN, WS_RUN = range(9)
N_CLASSES = 9


CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


_WS, _LETTER, _DIGIT = regex.compile(r"\s"), regex.compile(r"\p{L}"), regex.compile(r"\p{N}")
_WS_RUN = regex.compile(r"\s\s$")


@lru_cache(maxsize=1 << 16)
def _class(ch: str) -> int:
    if ch == " ":
        return SPACE
    if _WS.match(ch):
        return WS
    if _LETTER.match(ch):
        return LETTER
    if _DIGIT.match(ch):
        return DIGIT
    return OTHER


def _may_end_contraction(text: str) -> bool:
    """Whether a pre-token matched by a contraction (`'s`, `'ll`, ...) can end with `text`."""
    low = text.lower()
    return any(low.endswith(c) or c.endswith(low) for c in CONTRACTIONS)


def last_char_class(data: bytes) -> int:
    """The class of the last character of `data` (`MID` when it ends inside a character;
    `CONTRACTION_END` for a letter that may end a contraction such as `'s`; `WS_RUN` when
    `data` ends with two or more whitespace characters)."""
    for k in range(1, min(4, len(data)) + 1):
        ch = _text(data[-k:])
        if ch is not None and len(ch) == 1:
            c = _class(ch)
            if c in (SPACE, WS) and _WS_RUN.search(data.decode("utf-8", "ignore")):
                return WS_RUN
            if c == LETTER and _may_end_contraction(data[-3:].decode("utf-8", "ignore")):
                return CONTRACTION_END
            return c
    return MID


def first_char_class(data: bytes) -> int:
    """The class of the first character of `data` (`MID` when it starts inside one,
    `UNKNOWN` when its first character is cut off)."""
    if not data or 0x80 <= data[0] < 0xC0:
        return MID
    for k in range(1, min(4, len(data)) + 1):
        ch = _text(data[:k])
        if ch is not None:
            return _class(ch)
    return UNKNOWN


def _classes(tokens: Sequence[bytes], of: Any, key: Any) -> np.ndarray:
    """`of(key(t))` for each token, computed once per key (`of(t) == of(key(t))`, as the
    first character's class depends only on the first 4 bytes)."""
    seen: dict = {}
    out = np.empty(len(tokens), dtype=np.intp)
    for i, t in enumerate(tokens):
        k = key(t)
        c = seen.get(k)
        if c is None:
            c = seen[k] = of(k)
        out[i] = c
    return out


def pair_tables(gpt2_regex: bool) -> tuple[np.ndarray, np.ndarray]:
    """`(possible, forbidden)` over pairs of character classes (x ends a token, y starts the next).

    `possible[x, y]`: some text puts a pre-token boundary between x and y, so the pair
    needs no BPE test. `forbidden[x, y]`: no canonical encoding has the pair.

    Under the GPT-2 pattern (`'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+|
    ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`) no boundary falls inside a character,
    after a space that a non-space follows, or between two digits, two "other"
    characters, or two letters the first of which cannot end a contraction; and a run
    of two or more whitespace characters followed by a non-space always splits before
    its last character, so a token ending in such a run cannot precede a non-space.
    Other pre-tokenizers: only the inside of a character is known to have no boundary.
    """
    possible = np.ones((N_CLASSES, N_CLASSES), dtype=bool)
    forbidden = np.zeros((N_CLASSES, N_CLASSES), dtype=bool)
    possible[MID, :] = possible[:, MID] = False
    if gpt2_regex:
        non_space = [LETTER, CONTRACTION_END, DIGIT, OTHER]
        possible[SPACE, non_space] = False
        possible[DIGIT, DIGIT] = possible[OTHER, OTHER] = False
        possible[LETTER, [LETTER, CONTRACTION_END]] = False
        forbidden[WS_RUN, non_space] = True
    return possible, forbidden


class CanonicalTokenization(Potential):
    """A Boolean potential over an LM's tokens that accepts the tokenizer's canonical encodings.

    With `enc` the tokenizer's encoding of a text as a continuation (no special tokens,
    no prefix space: the tokens spell the text, see `_text_encoding`), `bpe` its
    merges applied to a byte string as a whole (no pre-tokenization, see `ByteBPE`)
    and `ids(ctx)` the token ids of a context:

        prefix(ctx)   = 0  iff  bpe(t) == [t] for the first token t of ctx, and every
                               adjacent pair (a, b) of ctx is allowed
        complete(ctx) = 0  iff  prefix(ctx) = 0 and ids(ctx) == enc(utf8(b"".join(ctx)))

    where `(a, b)` is allowed iff `bpe(a + b) == [a, b]` or some text can put a
    pre-token boundary between `a` and `b`, and the characters that meet there do
    not rule the pair out (`pair_tables`). Byte strings that are not UTF-8 have no canonical encoding.

    Guarantees (byte-level BPE tokenizers): `complete` is exact (it is the
    tokenizer's own verdict). `prefix` is sound: every prefix of a canonical encoding
    passes, because a canonical encoding splits into pre-tokens, each encoded by BPE
    alone, and every adjacent pair of a BPE encoding is the BPE encoding of the pair
    (Vieira et al. 2025, "Language models over canonical byte-pair encodings"); a pair
    across a pre-token boundary is allowed. `prefix` is not complete: it may accept a
    context that no extension makes canonical (mostly at pre-token boundaries), which
    `complete` then rejects. A tokenizer that looks whole pre-tokens up first
    (`ignore_merges`, tiktoken-style) encodes a pre-token either as one token or by
    its merges, so the first-token test is dropped and pairs are tested with merges
    alone (a pair inside one pre-token is a pair of its merges). For tokenizers that
    are not byte-level BPE (SentencePiece) only `complete` constrains (prefix accepts
    every context).

    `logw_next(ctx)` is one row of a table over the last token, built lazily (one
    batched BPE call per row) and kept in an LRU of `cache_size` rows.

    Args:
        tokenizer: a Hugging Face tokenizer (fast tokenizers are batched in Rust).
        tables: the vocabulary's tables (`llm.tables`: the LM's tokens without EOS).
        token_ids: the tokenizer id of each vocabulary token, in vocabulary order.
        cache_size: the most table rows kept.
    """

    def __init__(
        self, tokenizer: Any, tables: VocabTables, token_ids: Sequence[int], cache_size: int = 1024
    ):
        if len(token_ids) != len(tables.vocab):
            raise ValueError(
                f"token_ids has {len(token_ids)} ids for a vocabulary of {len(tables.vocab)} tokens"
            )
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        super().__init__(tables=tables)
        self.tokenizer = tokenizer
        self.encoder = continuation_encoder(tokenizer)
        self.bpe = ByteBPE.of(tokenizer)
        self.token_ids = np.asarray(token_ids, dtype=np.int64)
        self._bytes = [bytes(t) for t in tables.vocab]
        self.cache_size = cache_size
        self._rows: RowCache[np.ndarray] = RowCache(self._row, cache_size)
        gpt2 = self.bpe is not None and self.bpe.gpt2_regex
        self._possible, self._forbidden = pair_tables(gpt2)
        self._first = _classes(self._bytes, first_char_class, lambda b: b[:4])
        self._last = np.array([last_char_class(b) for b in self._bytes], dtype=np.intp)
        if self.bpe is not None and self.bpe.whole_tokens:
            self._unary = np.ones(len(self._bytes), dtype=bool)  # any token may be a pre-token
        else:
            self._unary = self._bpe_matches(range(len(self._bytes)), None)

    @classmethod
    def from_llm(cls, llm: Any, cache_size: int = 1024) -> "CanonicalTokenization":
        """The potential over a `PromptedLLM`'s vocabulary (it shares `llm.tables`).

        Raises:
            TypeError: `llm` is not an LM whose vocabulary tokens carry token ids.
        """
        if not (isinstance(llm, Potential) and hasattr(getattr(llm, "model", None), "tokenizer")):
            raise TypeError(
                "Expected llm to be an instance of PromptedLLM (a potential over a model's "
                f"tokens that carry token ids, with llm.model.tokenizer), got {type(llm).__name__}"
            )
        ids = [getattr(t, "token_id", None) for t in llm.vocab]
        if any(i is None for i in ids):
            raise TypeError(
                "from_llm needs an LM whose vocabulary tokens carry token ids (a PromptedLLM)"
            )
        return cls(llm.model.tokenizer, llm.tables, ids, cache_size=cache_size)

    # Tables ------------------------------------------------------------------

    def _bpe_matches(self, tails: Any, first: int | None) -> np.ndarray:
        """For each position `b` in `tails`: `bpe(first + b) == [first, b]` (`bpe(b) == [b]`
        when `first` is None); all True without a byte-level BPE."""
        tails = list(tails)
        out = np.ones(len(tails), dtype=bool)
        if self.bpe is None or not tails:
            return out
        head = b"" if first is None else self._bytes[first]
        want = [] if first is None else [int(self.token_ids[first])]
        got = self.bpe.encode_batch([head + self._bytes[b] for b in tails])
        for k, (b, ids) in enumerate(zip(tails, got)):
            out[k] = ids == want + [int(self.token_ids[b])]
        return out

    def row(self, last: int) -> np.ndarray:
        """`allowed(vocab[last], b)` for every position b, built once and kept in an LRU."""
        return self._rows.get(last)

    def _row(self, last: int) -> np.ndarray:
        x = self._last[last]
        row = self._possible[x, self._first].copy()
        check = np.flatnonzero(~row)
        row[check] = self._bpe_matches(check, last)
        row &= ~self._forbidden[x, self._first]
        return row

    # Contexts ----------------------------------------------------------------

    def positions(self, context: Sequence[Any]) -> list[int]:
        """The vocabulary position of each token (plain bytes: the first token with them).

        Raises:
            ValueError: a token outside the vocabulary.
        """
        lookup, fallback, n = self.tables.lookup, self.tables.fallback, len(self.tables.vocab)
        out = []
        for tok in context:
            i = lookup.get(tok)
            if i is None and fallback is not None and type(tok) is bytes:
                i = fallback.get(tok)
            if i is None or i >= n:
                raise ValueError(f"token {tok!r} is not in the vocabulary of {self!r}")
            out.append(i)
        return out

    def _live(self, pos: Sequence[int]) -> bool:
        if not pos:
            return True
        if not self._unary[pos[0]]:
            return False
        return all(self.row(a)[b] for a, b in zip(pos, pos[1:]))

    def _canonical(self, pos: Sequence[int]) -> bool:
        text = _text(b"".join(self._bytes[i] for i in pos))
        if text is None:
            return False
        return self.encoder.encode(text) == [int(self.token_ids[i]) for i in pos]

    async def prefix(self, context: list) -> float:
        return 0.0 if self._live(self.positions(context)) else NEG_INF

    async def complete(self, context: list) -> float:
        pos = self.positions(context)
        return 0.0 if self._live(pos) and self._canonical(pos) else NEG_INF

    async def sparse_logw_next(self, context: list) -> SparseLogws:
        """The allowed next tokens (`row(last)`) and EOS when `context` is canonical."""
        pos = self.positions(context)
        if not self._live(pos):
            raise ValueError(f"context {context!r} has weight zero under {self!r}")
        allowed = self._unary if not pos else self.row(pos[-1])
        idx = np.flatnonzero(allowed)
        if self._canonical(pos):
            idx = np.append(idx, len(self.tables.vocab))
        return SparseLogws(idx, np.zeros(len(idx)))

    async def logw_next(self, context: list) -> LazyWeights:
        return (await self.batch_logw_next([context]))[0]

    def spawn(self) -> "CanonicalTokenization":
        return CanonicalTokenization(
            self.tokenizer, self.tables, self.token_ids.tolist(), self.cache_size
        )

    def __repr__(self) -> str:
        return f"CanonicalTokenization(|V|={len(self.tables.vocab)})"


__all__ = ["CanonicalTokenization"]
