"""The engine on a JSON grammar that bounds `JsonSchema`'s language, with exact checks.

Two shapes of schema have no grammar of exactly their documents, yet the engine can
serve them exactly:

- a `number` with bounds other than a lower bound of 0 (not regular once the
  exponent is free, `_write_json_numbers`): the grammar is written twice, `sub` (bounded
  numbers spelled without an exponent, a subset of the documents) and `sup` (plus
  every spelling with an exponent, a superset). Every prefix of `sub` is a prefix of
  a document and every prefix of a document is a prefix of `sup`; so a token in
  `sub`'s mask is allowed, one outside `sup`'s is not, and only the tokens between
  the two masks (those that write an exponent in a bounded number, a few) are
  checked exactly, on `JsonSchema`'s recognizer. Where the bounds decide by sign
  which mantissas some exponent brings within them (a range holding 0, or a decade
  wide: `_write_json_numbers.exponent_mantissas`), `sup` is "gated": exact on every
  spelling without an exponent. Then, where the context is in `sub`'s prefixes and
  does not end inside an exponent, `sup`'s one mask is exact except on the tokens
  that write an exponent's mark (a digit then `e`/`E`, or `e`/`E` after the
  context's digit): only those are checked, on `sub`'s matcher, then on the
  recognizer (`CheckedConstraint._gated`), so a step costs one engine mask.
  Otherwise (inside an exponent, or bounds narrower than a decade) `sub`'s mask is
  computed as below. Where no token `sup` allows can
  write a number's bytes (`CheckedConstraint._may_write_number`: the context does not
  end inside a number, no allowed token starts one where a value may start, none
  holds `:`, `,` or `[` before a digit or `-`), the two masks are equal (a number the
  context completed is in `sub`, or `sub` is dead there), so `sub`'s mask is not
  computed;
- a schema `JsonSchema` reads as a superset on prefixes (`not`, `uniqueItems`,
  `multipleOf`, `patternProperties`, ...): its recognizer's prefix language is the
  compiled schema's, which the grammar writes exactly (`sup`, no `sub`); only EOS
  differs, where `JsonSchema` also checks the whole document
  (`JsonSchema.document_ok`), so EOS is checked the same way where the engine
  accepts.

Either way the rows, `prefix`, `complete` and `allowed_next` are `JsonSchema`'s
coercion's exactly (pinned in tests/engine/test_json_engine_grammar.py).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Sequence

import numpy as np

from genlm.control.engine._guided_engine import fill_masks
from genlm.control.engine.guided import GuidedConstraint
from genlm.control.weights import NEG_INF

NUMBER_BYTES = frozenset(b"0123456789.eE+-")
_EXPONENT_MARK = re.compile(rb"[0-9][eE]")
VALUE_OPENERS = frozenset(b":,[")


def _opens_number(text: bytes) -> bool:
    """Whether `text` holds `:`, `,` or `[` followed (later in it) by a digit or `-`:
    a token that may start a number after its first byte."""
    seen = False
    for b in text:
        if b in VALUE_OPENERS:
            seen = True
        elif seen and (0x30 <= b <= 0x39 or b == 0x2D):
            return True
    return False


class CheckedSource(NamedTuple):
    """The engine grammars of a schema served with checks: `sup` (a superset of the
    prefixes, exact where `sub` is None) and `sub` (a subset, or None); `gated`:
    `sup` is exact on every spelling of its numbers without an exponent
    (`Spelling.GATED` of `_write_json_numbers.number_regex`)."""

    sup: str
    sub: str | None
    gated: bool = False


class CheckedConstraint(GuidedConstraint):
    """`GuidedConstraint` on `source.sup`, corrected to the language of `exact` (the
    byte-level `JsonSchema`): tokens between the `sub` and `sup` masks are checked on
    `exact`'s recognizer, and EOS with `exact.document_ok` (see the module docstring).
    `matcher(context)` is the `sup` grammar's matcher (a superset where `sub` is set)."""

    def __init__(self, llm: Any, source: CheckedSource, exact: Any, *, cache_size: int = 4096):
        self.checked, self.exact = source, exact
        self.sub = (
            None
            if source.sub is None
            else GuidedConstraint(llm, "lark", source.sub, cache_size=cache_size)
        )
        super().__init__(llm, "lark", source.sup, cache_size=cache_size)
        self._bytes = [bytes(t) for t in self.token_maps.decode]
        # tokens that start a number after their first byte, tokens that start with one,
        # tokens that hold a digit followed by `e`/`E` (an exponent's mark), tokens that
        # start with `e`/`E` (one after a digit of the context)
        self._opens = np.zeros(self.engine.n_words, dtype=np.int32)
        self._starts = np.zeros(self.engine.n_words, dtype=np.int32)
        self._marks = np.zeros(self.engine.n_words, dtype=np.int32)
        self._leads = np.zeros(self.engine.n_words, dtype=np.int32)
        for tid, text in enumerate(self._bytes):
            head = text.lstrip(b" \t\n\r")[:1]
            for words, hit in (
                (self._opens, _opens_number(text)),
                (self._starts, head and head in b"-0123456789"),
                (self._marks, _EXPONENT_MARK.search(text) is not None),
                (self._leads, text[:1] in (b"e", b"E")),
            ):
                if hit:
                    words.view(np.uint32)[tid >> 5] |= np.uint32(1 << (tid & 31))

    def _init_cache(self) -> None:
        super()._init_cache()
        if "_bytes" in self.__dict__:  # a spawned copy: its own caches everywhere
            self.exact = self.exact.spawn()
            self.sub = None if self.sub is None else self.sub.spawn()

    def clear_cache(self) -> None:
        """As `GuidedConstraint.clear_cache`, for the `sub` grammar too."""
        super().clear_cache()
        if self.sub is not None:
            self.sub.clear_cache()

    def _may_write_number(self, ids: Sequence[int], words: np.ndarray) -> bool:
        """Whether a token `sup` allows (`words`) may write a number's bytes: the
        context ends inside a number (its last byte `0-9 . e E + -`); or it ends where
        a value may start (its last byte other than whitespace is `:`, `,` or `[`, or
        there is none) and an allowed token starts, after whitespace, with a digit or
        `-`; or an allowed token holds `:`, `,` or `[` before a digit or `-`."""
        if (words & self._opens).any():
            return True
        for tid in reversed(ids):
            text = self._bytes[tid]
            if text and text[-1] in NUMBER_BYTES:
                return True
            text = text.rstrip(b" \t\n\r")
            if text:
                return text[-1] in VALUE_OPENERS and bool((words & self._starts).any())
        return bool((words & self._starts).any())

    def _number_tail(self, ids: Sequence[int]) -> bytes:
        """The context's last run of bytes `0-9 . e E + -` (the number it ends in)."""
        run = []
        for tid in reversed(ids):
            text = self._bytes[tid]
            k = len(text)
            while k and text[k - 1] in NUMBER_BYTES:
                k -= 1
            run.append(text[k:])
            if k:
                break
        return b"".join(reversed(run))

    def _data(self, context: Sequence[Any]) -> bytes:
        return self._joined(self.token_maps.context_ids(context))

    def _joined(self, ids: Sequence[int]) -> bytes:
        return b"".join([self._bytes[i] for i in ids])

    def _exact_after(self, state, data: bytes):
        for b in data:
            if state is None:
                return None
            state = self.exact.advance(state, b)
        return state

    def _exact_accepts(self, state, data: bytes) -> bool:
        if state is None:
            return False
        machine = getattr(state, "machine", state)  # a DocState where documents are checked
        return self.exact.transitions.accepts(machine) and self.exact.document_ok(data)

    # Masks --------------------------------------------------------------------

    def _packed(self, contexts: Sequence[Sequence[Any]]) -> tuple:
        states = self._live(contexts)
        slot: dict[int, int] = {}  # a matcher appears once in a parallel fill
        inverse = np.array([slot.setdefault(id(s), len(slot)) for s in states], dtype=np.intp)
        distinct = list({id(s): s for s in states}.values())
        masks = fill_masks(self.engine, distinct)[inverse]  # a copy per context
        accepting = np.array([s.is_accepting() for s in states], dtype=bool)
        for k, c in enumerate(contexts):
            masks[k], accepting[k] = self._corrected(c, masks[k], bool(accepting[k]))
        return masks, accepting

    def _corrected(self, context, words: np.ndarray, accepting: bool) -> tuple:
        """The exact packed mask and EOS of `context`, from `sup`'s."""
        ids = self.token_maps.context_ids(context)
        if self.sub is None:
            if accepting:
                accepting = self.exact.document_ok(self._joined(ids))
            return words, accepting
        low = self.sub._cache.get(ids)  # `sub.matcher(context)`, the ids already known
        if low is not None and self.checked.gated:
            tail = self._number_tail(ids)
            if b"e" not in tail and b"E" not in tail:
                return self._gated(ids, words, accepting, low, tail)
        if low is not None and not self._may_write_number(ids, words):
            # no token can write a bounded number's digits here: `sub` and `sup` agree
            if accepting:
                accepting = self.exact.document_ok(self._joined(ids))
            return words, accepting
        data = self._joined(ids)
        if low is not None:
            lower = fill_masks(self.sub.engine, [low])[0]
            low_accepts = low.is_accepting()
        else:
            lower, low_accepts = np.zeros_like(words), False
        between = (words & ~lower).view(np.uint32)
        out = lower.copy()
        if between.any() or (accepting and not low_accepts):
            state = self.exact.state_of(list(data))
            if state is None:
                raise ValueError(f"context {list(context)!r} has weight zero under {self!r}")
            bits = np.unpackbits(between.view(np.uint8), bitorder="little")
            for tid in np.flatnonzero(bits).tolist():
                if self._exact_after(state, self._bytes[tid]) is not None:
                    out.view(np.uint32)[tid >> 5] |= np.uint32(1 << (tid & 31))
            accepting = low_accepts or (accepting and self._exact_accepts(state, data))
        else:
            accepting = low_accepts
        if accepting and low_accepts:  # in `sub`'s documents: also the whole-document check
            accepting = self.exact.document_ok(data)
        return out, accepting

    def _gated(self, ids, words: np.ndarray, accepting: bool, low, tail: bytes) -> tuple:
        """The exact mask and EOS from a gated `sup`'s, where the context is in `sub`'s
        prefixes (`low`: so its numbers are the schema's) and does not end inside an
        exponent: `sup` is exact on every token that writes no exponent's mark (a digit
        then `e`/`E`, or `e`/`E` after the context's digit), so only those are
        checked, first on `sub` (its exponents -8..8), then on the recognizer."""
        marks = words & self._marks
        if tail[-1:].isdigit():
            marks |= words & self._leads
        out, data = words, None
        bits = marks.view(np.uint32)
        hits = np.flatnonzero(bits).tolist()  # a few words: walk their bits
        if hits:
            out = words.copy()
            state = None
            tids = [w * 32 + b for w in hits for b in range(32) if int(bits[w]) >> b & 1]
            for tid in tids:
                if low.validate_tokens([tid]) == 1:
                    continue  # in `sub`'s prefixes, so in the language's
                if state is None:
                    data = self._joined(ids)
                    state = self.exact.state_of(list(data))
                    if state is None:
                        raise ValueError(f"context {ids!r} has weight zero under {self!r}")
                if self._exact_after(state, self._bytes[tid]) is None:
                    out.view(np.uint32)[tid >> 5] &= ~np.uint32(1 << (tid & 31))
        if accepting:  # no exponent at the end: `sup` accepts exactly the schema's numbers
            accepting = self.exact.document_ok(self._joined(ids) if data is None else data)
        return out, accepting

    # Single questions -----------------------------------------------------------

    async def prefix(self, context: Sequence[Any]) -> float:
        if await super().prefix(context) == NEG_INF:
            return NEG_INF
        if self.sub is None or await self.sub.prefix(context) == 0.0:
            return 0.0
        return 0.0 if self.exact.state_of(list(self._data(context))) is not None else NEG_INF

    async def complete(self, context: Sequence[Any]) -> float:
        if await super().complete(context) == NEG_INF:
            return NEG_INF
        data = self._data(context)
        if self.sub is not None and await self.sub.complete(context) == 0.0:
            return 0.0 if self.exact.document_ok(data) else NEG_INF
        return 0.0 if self._exact_accepts(self.exact.state_of(list(data)), data) else NEG_INF

    async def allowed_next(self, context: Sequence[Any], indices: Sequence[int]) -> Sequence[bool]:
        """Which tokens at `indices` (of `vocab_eos`) may follow `context`: `sup`'s
        answer, then for the tokens it allows `sub`'s, then the exact check of the
        ones between (AWRS asks this of its draws only)."""
        wide = await super().allowed_next(context, indices)
        eos = len(self.vocab)
        out = [bool(x) for x in wide]
        if not any(out):
            return out
        narrow = (
            await self.sub.allowed_next(context, indices)
            if self.sub is not None and self.sub.matcher(context) is not None
            else [False] * len(indices)
        )
        state, data = None, None
        for k, i in enumerate(indices):
            if i == eos:
                out[k] = out[k] and await self.complete(context) == 0.0
                continue
            if not out[k] or (self.sub is not None and narrow[k]):
                continue
            if self.sub is None:
                continue
            if data is None:
                data = self._data(context)
                state = self.exact.state_of(list(data))
            tid = int(self.engine.vocab_ids[i])
            out[k] = self._exact_after(state, self._bytes[tid]) is not None
        return out

    def __repr__(self) -> str:
        return f"CheckedConstraint(|V|={len(self.vocab)}, sub={self.sub is not None})"


def checked_constraint(llm: Any, source: CheckedSource, exact: Any) -> CheckedConstraint:
    """The engine constraint for `source` over `llm`, exact for `exact`'s language."""
    return CheckedConstraint(llm, source, exact)


__all__ = ["CheckedSource", "CheckedConstraint", "checked_constraint"]
