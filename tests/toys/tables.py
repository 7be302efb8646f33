"""Tiny potentials for exact sampler tests: rows of `logw_next` given by a function.

`NextTable(vocab, row)` is the autoregressive potential with
`logw_next(ctx) = row(ctx)`, `prefix(ctx) = Σ_i row(ctx[:i])[ctx[i]]` and
`complete(ctx) = prefix(ctx) + row(ctx)[EOS]`, so every identity between
`prefix`, `complete` and `logw_next` holds exactly.
"""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from genlm.control import Potential
from genlm.control.constant import EOS

NEG_INF = float("-inf")
LETTERS = ["a", "b", "c", "d", "e"]


class NextTable(Potential):
    """`logw_next(ctx) = row(tuple(ctx))`, a log-weight array over `vocab + [EOS]`.

    Attributes:
        calls: how many `prefix`/`complete` calls each context received.
    """

    def __init__(self, vocab, row: Callable[[tuple], np.ndarray], tables=None, strict=False):
        super().__init__(vocab, tables=tables)
        self.row = row
        self.strict = strict
        self.calls = {"prefix": 0, "complete": 0, "logw_next": 0}

    def _row(self, ctx) -> np.ndarray:
        r = np.asarray(self.row(tuple(ctx)), dtype=np.float64)
        assert r.shape == (len(self.vocab_eos),)
        return r

    def _prefix(self, context) -> float:
        total = 0.0
        for i, x in enumerate(context):
            total += self._row(context[:i])[self.lookup[x]]
        return total

    async def prefix(self, context):
        self.calls["prefix"] += 1
        return self._prefix(context)

    async def complete(self, context):
        self.calls["complete"] += 1
        return self._prefix(context) + self._row(context)[-1]

    async def logw_next(self, context):
        self.calls["logw_next"] += 1
        if self.strict and self._prefix(context) == NEG_INF:
            raise ValueError(f"context {list(context)!r} has weight zero")
        return self.make_lazy_weights(self._row(context))

    def spawn(self):
        return NextTable(self.vocab, self.row, tables=self.tables, strict=self.strict)


def _rng(seed: int, ctx: tuple) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(ctx).encode())])


def random_rows(n: int, seed: int, p_zero: float) -> Callable[[tuple], np.ndarray]:
    """Rows of random log weights over `n + 1` entries, each zero with prob. `p_zero`."""

    def row(ctx: tuple) -> np.ndarray:
        rng = _rng(seed, ctx)
        w = rng.uniform(0.05, 2.0, size=n + 1)
        w[rng.random(n + 1) < p_zero] = 0.0
        with np.errstate(divide="ignore"):
            return np.log(w)

    return row


def random_masks(n: int, seed: int, p_allow: float, dead: frozenset = frozenset()) -> Callable:
    """Boolean rows (0 or -inf) allowing each entry with prob. `p_allow`; every entry
    is rejected in the contexts of `dead`."""

    def row(ctx: tuple) -> np.ndarray:
        if ctx in dead:
            return np.full(n + 1, NEG_INF)
        rng = _rng(seed + 7919, ctx)
        return np.where(rng.random(n + 1) < p_allow, 0.0, NEG_INF)

    return row


def lm(vocab, seed: int, p_zero: float = 0.0) -> NextTable:
    return NextTable(vocab, random_rows(len(vocab), seed, p_zero))


def condition(vocab, seed: int, p_allow: float = 0.6, dead: frozenset = frozenset()) -> NextTable:
    return NextTable(vocab, random_masks(len(vocab), seed, p_allow, dead))


class Toy:
    """A Hypothesis draw: a vocabulary, seeds and zero/allow rates."""

    def __init__(self, n, seed, p_zero, p_allow, dead_root):
        self.vocab = LETTERS[:n]
        self.seed = seed
        self.p_zero = p_zero
        self.p_allow = p_allow
        self.dead_root = dead_root

    def lm(self, offset: int = 0) -> NextTable:
        return lm(self.vocab, self.seed + offset, self.p_zero)

    def condition(self) -> NextTable:
        dead = frozenset({()}) if self.dead_root else frozenset()
        return condition(self.vocab, self.seed, self.p_allow, dead)

    def __repr__(self):
        return (
            f"Toy(n={len(self.vocab)}, seed={self.seed}, p_zero={self.p_zero}, "
            f"p_allow={self.p_allow}, dead_root={self.dead_root})"
        )


def toy_strategy(max_tokens: int = 5):
    """Hypothesis toys with 1..max_tokens tokens (plus EOS)."""
    return st.builds(
        Toy,
        n=st.integers(1, max_tokens),
        seed=st.integers(0, 2**16),
        p_zero=st.sampled_from([0.0, 0.3, 0.6]),
        p_allow=st.sampled_from([0.3, 0.6, 1.0]),
        dead_root=st.booleans(),
    )


toys = toy_strategy(5)


def item_potential(alphabet: bytes, seed: int, p_zero: float = 0.3) -> NextTable:
    """A potential over the ints of `alphabet` with random weights, some zero; like the
    base `Potential`, its `logw_next` raises at a context of weight zero."""
    return NextTable(list(alphabet), random_rows(len(alphabet), seed, p_zero), strict=True)


class SetAsTokens:
    """Draws a set, then a uniform member weighted |S|·ŵ: its enumeration is the set's mean."""

    def __init__(self, set_sampler):
        self.set_sampler = set_sampler

    async def sample(self, context, draw=None):
        s = await self.set_sampler.sample_set(context, draw=draw)
        n = len(s.tokens)
        i = draw({k: 1 / n for k in range(n)})
        return s.tokens[i], s.logws[i] + np.log(n), s.logp - np.log(n)


__all__ = [
    "EOS",
    "NextTable",
    "SetAsTokens",
    "Toy",
    "toys",
    "toy_strategy",
    "lm",
    "condition",
    "item_potential",
    "random_rows",
]
