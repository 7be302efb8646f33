"""Tiny potentials with closed-form weights, for exact tests of the core."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from genlm.control import Potential
from genlm.control.testing import enumerate_target, sampler_target


class Tabular(Potential):
    """A potential over a finite language: `complete(xs) = log table[xs]` and
    `prefix(xs) = log Σ_{ys ⊒ xs} table[ys]` (zero weight gives `-inf`)."""

    def __init__(self, vocab, table, tables=None):
        super().__init__(vocab, tables=tables)
        self.table = {tuple(k): float(v) for k, v in table.items()}
        self.calls = {"prefix": 0, "complete": 0, "batch_prefix": 0, "batch_logw_next": 0}

    @staticmethod
    def _log(x: float) -> float:
        return math.log(x) if x > 0 else float("-inf")

    async def prefix(self, context):
        self.calls["prefix"] += 1
        n = len(context)
        return self._log(sum(v for k, v in self.table.items() if k[:n] == tuple(context)))

    async def complete(self, context):
        self.calls["complete"] += 1
        return self._log(self.table.get(tuple(context), 0.0))

    async def batch_prefix(self, contexts):
        self.calls["batch_prefix"] += 1
        return await super().batch_prefix(contexts)

    async def batch_logw_next(self, contexts):
        self.calls["batch_logw_next"] += 1
        return await super().batch_logw_next(contexts)

    def spawn(self):
        return Tabular(self.vocab, self.table, tables=self.tables)


def random_tabular(vocab, rng: np.random.Generator, max_len: int = 3, p_zero: float = 0.3) -> Tabular:
    """A `Tabular` with random weights on every sequence of length ≤ max_len, some zero."""
    table = {}
    frontier = [()]
    for _ in range(max_len + 1):
        nxt = []
        for seq in frontier:
            table[seq] = 0.0 if rng.random() < p_zero else float(rng.random())
            nxt.extend(seq + (x,) for x in vocab)
        frontier = nxt
    if all(v == 0 for v in table.values()):
        table[()] = 1.0
    return Tabular(vocab, table)


class Searched(Potential):
    """A condition's `prefix`, `complete` and block checks (`allowed_next`) without its
    cheap rows, so that AWRS takes its search path (the Horvitz-Thompson race weights)
    instead of the exact one. With `budget=True` it also forwards the token budget
    (`batch_tokens_to_finish`); off by default, since an automaton's bound is infinite
    exactly at the tokens it forbids, so the budget's mask would hand AWRS the allowed
    set and its search would accept every draw."""

    def __init__(self, inner: Potential, budget: bool = False):
        super().__init__(tables=inner.tables)
        self.inner = inner
        self.budget = budget

    async def prefix(self, context):
        return await self.inner.prefix(context)

    async def complete(self, context):
        return await self.inner.complete(context)

    async def batch_prefix(self, contexts):
        return await self.inner.batch_prefix(contexts)

    async def allowed_next(self, context, indices):
        return await self.inner.allowed_next(context, indices)

    @property
    def batch_tokens_to_finish(self):
        return self.inner.batch_tokens_to_finish if self.budget else None


def segmentations(text: bytes, pieces: dict[bytes, list[int]], max_len: int):
    """Every way to write `text` as at most `max_len` tokens (indices)."""
    if not text:
        yield ()
        return
    if max_len == 0:
        return
    for end in range(1, len(text) + 1):
        for i in pieces.get(text[:end], ()):
            for rest in segmentations(text[end:], pieces, max_len - 1):
                yield (i, *rest)


def budget_keeps_target(sampler, lm, condition, max_lens) -> bool:
    """Assert that, at each `max_tokens` in `max_lens`, the sampler's exact target with
    the token budget and without it is `enumerate_target`'s (same log Z and posterior)
    and that the budget visits no more contexts; return whether it pruned any."""
    pruned = False
    for max_tokens in max_lens:
        exact = asyncio.run(enumerate_target(lm, max_tokens, condition=condition))
        visited = {}
        for budget_aware in (True, False):
            got = asyncio.run(sampler_target(sampler, max_tokens, budget_aware=budget_aware))
            visited[budget_aware] = got.visited
            if exact.log_z == -math.inf:
                assert got.log_z == -math.inf
                continue
            assert got.log_z == pytest.approx(exact.log_z, abs=1e-9), (max_tokens, budget_aware)
            assert got.posterior.keys() == exact.posterior.keys()
            for text, p in exact.posterior.items():
                assert got.posterior[text] == pytest.approx(p, abs=1e-9)
        assert visited[True] <= visited[False]
        pruned |= visited[True] < visited[False]
    return pruned


def counting_calls(fn):
    """`(wrapper, sizes)`: an async `wrapper(batch)` that records `len(batch)` in
    `sizes` and awaits `fn(batch)` (tests put it where a batched method was, to count
    the calls and their sizes)."""
    sizes: list[int] = []

    async def wrapper(batch):
        sizes.append(len(batch))
        return await fn(batch)

    return wrapper, sizes
