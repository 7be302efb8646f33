"""A potential that scores named sections of a structured generation.

A reasoning model's output is cut into sections by its special tokens (Harmony's
channels, the thinking and the answer of a think-tag model). A `Format` reads the
context one token at a time into a `Sections` record: the sections closed so far,
the open one, and whether the output may end here. `SectionedPotential` gives each
section its scorer's weight and a context outside the format weight zero:

    prefix(x)   = Σ_{closed s} scorer_s.complete(s's tokens) + scorer_o.prefix(open's tokens)
    complete(x) = Σ_{closed s} scorer_s.complete(s's tokens) + scorer_o.complete(open's tokens)
                  (only where the format may end; else -inf)

Sections without a scorer weigh 1 (log 0): the thinking is left free.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Hashable, Protocol, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._device import to_host
from genlm.control._lru import LRU
from genlm.control._state_cache import PrefixStateCache
from genlm.control.potential.base import Potential
from genlm.control.weights import NEG_INF, LazyWeights


class VocabularyMismatch(ValueError, AssertionError):
    """A scorer whose vocabulary is not a subset of the model's (an `AssertionError`
    too, as 0.4.1's `HarmonyPotential` raised)."""


@dataclass(frozen=True)
class Sections:
    """Where a reader of the format stands after `pos` tokens.

    Attributes:
        pos: tokens read.
        closed: `(section, start, end)` of each finished section: tokens `start:end`.
        open: `(section, start)` of the section that ordinary tokens extend, or None
            (inside a header, between messages).
        can_end: whether the output may end here (EOS has positive weight).
        mode: the reader's mode (format-specific).
        text: header text read so far (format-specific).
        flag: a format-specific flag (Harmony: the message has a recipient).
    """

    pos: int = 0
    closed: tuple = ()
    open: tuple | None = None
    can_end: bool = False
    mode: str = ""
    text: bytes = b""
    flag: bool = False

    def moved(self, **changes: Any) -> "Sections":
        """This record one token later, with `changes`."""
        return replace(self, pos=self.pos + 1, **changes)


class Format(Protocol):
    """What `SectionedPotential` needs of a format: its tokens, its special token ids,
    `kind(token)` (a special token's name, by id; else None), and a reader `advance(state, kind, data) -> Sections | None` (None: out of format)
    where `kind` is a special token's name or None for an ordinary token of bytes `data`."""

    token_maps: Any
    special_ids: dict[int, str]

    def root(self) -> Sections: ...

    def kind(self, token: Any) -> str | None: ...

    def advance(self, state: Sections, kind: str | None, data: bytes) -> Sections | None: ...


class SectionedPotential(Potential):
    """Scores the sections of a format by their scorers; weight zero outside the format.

    `logw_next(x)[t]` is exact: an ordinary token inside a scored section takes the
    scorer's own row (the scorer reads only the section's tokens, so a compiled
    scorer keeps its speed), inside a free section 0, inside a header 0 or -inf by the
    format (one row per header text, cached); each special token and EOS is scored by
    `prefix(x + [t]) - prefix(x)` (`complete(x) - prefix(x)` for EOS).

    Args:
        fmt: the format (its `token_maps` fix the vocabulary: the model's tokens
            minus its EOS tokens, as `PromptedLLM` has them).
        scorers: section name → the potential that scores that section's tokens (its
            vocabulary a subset of the model's).
        cache_size: the most reader states kept (contexts extended one token at a
            time cost one step each).
    """

    def __init__(self, fmt: Format, scorers: dict[str, Potential], cache_size: int = 16384):
        super().__init__(tables=fmt.token_maps.tables)
        self.format = fmt
        self.scorers = dict(scorers)
        by_id = {tok.token_id: i for i, tok in enumerate(self.vocab)}
        self._special_idx = {by_id[i]: name for i, name in fmt.special_ids.items() if i in by_id}
        self._ordinary = np.ones(len(self.vocab), dtype=bool)
        self._ordinary[list(self._special_idx)] = False
        self._maps = {name: self._index_into(p) for name, p in self.scorers.items()}
        self._decode = fmt.token_maps.decode
        self._states = PrefixStateCache(fmt.root(), self._step, size=cache_size)
        self._closed_weights: LRU = LRU(4096)
        self._header_rows: LRU = LRU(256)
        self._groups: dict | None = None

    def _index_into(self, scorer: Potential) -> np.ndarray:
        """Position of each of our tokens in `scorer.vocab_eos` (-1: not there)."""
        if list(scorer.vocab) == list(self.vocab):
            return np.arange(len(self.vocab))
        where = {}
        for j, tok in enumerate(scorer.vocab):
            where.setdefault(tok, j)
        extra = set(where) - set(self.vocab)
        if extra:
            raise VocabularyMismatch(
                f"the scorer's vocabulary must be a subset of the model's; it also has "
                f"{sorted(extra, key=repr)[:5]!r} (a byte-level constraint is coerced onto the "
                f"model first: constraint.coerce(llm, f=b''.join))"
            )
        return np.array([where.get(tok, -1) for tok in self.vocab], dtype=np.int64)

    def _step(self, state: Sections, key: Any) -> Sections | None:
        token = self._decode[key] if isinstance(key, int) else key
        return self.format.advance(state, self.format.kind(token), bytes(token))

    def sections(self, context: Sequence[Any]) -> Sections | None:
        """The reader's record after `context` (None: `context` leaves the format).

        States are keyed by token ids (ints hash in C; a `Token` hashes in Python),
        plain-bytes tokens by themselves."""
        try:
            key = [t.token_id for t in context]
        except AttributeError:
            key = [getattr(t, "token_id", t) for t in context]
        return self._states.get(key)

    def cleanup(self) -> Cleaned:
        """Clean up each scorer once."""
        unique = {id(p): p for p in self.scorers.values()}
        return cleaned(*(p.cleanup() for p in unique.values()))

    async def _closed(self, name: str, content: list) -> float:
        key = (name, *(getattr(t, "token_id", t) for t in content))  # ids hash in C
        hit = self._closed_weights.get(key)
        if hit is None:
            hit = float(await self.scorers[name].complete(content))
            self._closed_weights.put(key, hit)
        return hit

    async def _score(self, state: Sections, context: Sequence[Any], ending: bool) -> float:
        """prefix (or, with `ending`, complete) of `context`, read into `state` (or of
        `context` plus one special token: a special token is never a section's content,
        so the sections' ranges lie in `context`)."""
        terms = [
            self._closed(n, list(context[a:b])) for n, a, b in state.closed if n in self.scorers
        ]
        if state.open is not None and state.open[0] in self.scorers:
            name, a = state.open
            method = self.scorers[name].complete if ending else self.scorers[name].prefix
            terms.append(method(list(context[a:])))
        values = await asyncio.gather(*terms)
        return float(sum(values)) if all(v > NEG_INF for v in values) else NEG_INF

    async def prefix(self, context: list) -> float:
        state = self.sections(context)
        return NEG_INF if state is None else await self._score(state, context, False)

    async def complete(self, context: list) -> float:
        state = self.sections(context)
        if state is None or not state.can_end:
            return NEG_INF
        return await self._score(state, context, True)

    def _header_row(self, state: Sections) -> np.ndarray:
        """0 / -inf per ordinary token: does it keep the header in the format?

        Viability is prefix-closed (a token that keeps the header viable starts with a
        byte that does), so only the tokens whose first byte is viable are tried."""
        key: Hashable = (state.mode, state.text, state.flag)
        row = self._header_rows.get(key)
        if row is None:
            row = np.full(len(self.vocab), NEG_INF)
            groups = self._by_first_byte()
            for first, idxs in groups.items():
                if first is not None and self.format.advance(state, None, bytes([first])) is None:
                    continue
                for i in idxs:
                    if self.format.advance(state, None, bytes(self.vocab[i])) is not None:
                        row[i] = 0.0
            self._header_rows.put(key, row)
        return row

    def _by_first_byte(self) -> dict:
        """Ordinary token indices grouped by their first byte (None: the empty token)."""
        if self._groups is None:
            groups: dict = {}
            for i in np.flatnonzero(self._ordinary):
                data = bytes(self.vocab[i])
                groups.setdefault(data[0] if data else None, []).append(int(i))
            self._groups = groups
        return self._groups

    async def _ordinary_row(self, state: Sections, context: list) -> np.ndarray:
        if state.open is None:
            return self._header_row(state)
        name, a = state.open
        if name not in self.scorers:
            return np.zeros(len(self.vocab))
        inner = await self.scorers[name].logw_next(list(context[a:]))
        weights = np.asarray(to_host(inner.weights), dtype=np.float64)
        idx = self._maps[name]
        return np.where(idx >= 0, weights[idx], NEG_INF)

    async def logw_next(self, context: list) -> LazyWeights:
        """`logw_next(x)[t] = prefix(x + [t]) - prefix(x)`, EOS: `complete(x) - prefix(x)`
        (all -inf where `prefix(x)` is -inf; 0.4.1's `HarmonyPotential` raised `ValueError`)."""
        context = list(context)
        out = np.full(len(self.vocab) + 1, NEG_INF)
        state = self.sections(context)
        here = NEG_INF if state is None else await self._score(state, context, False)
        if here == NEG_INF:
            return self.make_lazy_weights(out)
        row = await self._ordinary_row(state, context)
        out[:-1][self._ordinary] = row[self._ordinary]

        async def special(i: int, name: str) -> float:
            tok = self.vocab[i]
            after = self.format.advance(state, name, bytes(tok))
            return NEG_INF if after is None else await self._score(after, context, False)

        specials = list(self._special_idx.items())
        values = await asyncio.gather(*(special(i, n) for i, n in specials))
        for (i, _), v in zip(specials, values):
            out[i] = v - here if v > NEG_INF else NEG_INF
        if state.can_end:
            end = await self._score(state, context, True)
            out[-1] = end - here if end > NEG_INF else NEG_INF
        return self.make_lazy_weights(out)
