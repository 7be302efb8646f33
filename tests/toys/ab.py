"""Tiny potentials over `AB = [b"a", b"b"]` whose SMC targets can be enumerated exactly."""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from genlm.control import EOS, Potential
from genlm.control.window import Window
from toys.core import Tabular  # noqa: F401  (re-exported: the SMC tests' finite language)

AB = [b"a", b"b"]


class BigramLM(Potential):
    """A normalized bigram LM: `p(x_i | x_{i-1})` from `table[prev]`, a row over
    `vocab + [EOS]` (the row of `None` starts a sequence). Counts its batch calls."""

    def __init__(self, vocab, table: dict, tables=None):
        super().__init__(vocab, tables=tables)
        with np.errstate(divide="ignore"):  # a zero probability is a -inf log weight
            self.table = {k: np.log(np.asarray(v, dtype=np.float64)) for k, v in table.items()}
        self.batch_calls = 0
        self.contexts_seen = 0

    def _row(self, context) -> np.ndarray:
        return self.table[context[-1] if context else None]

    def _path(self, context) -> float:
        total, prev = 0.0, None
        for x in context:
            total += self.table[prev][self.lookup[x]]
            prev = x
        return float(total)

    async def prefix(self, context):
        return self._path(context)

    async def complete(self, context):
        return self._path(context) + float(self._row(context)[-1])

    async def logw_next(self, context):
        return self.make_lazy_weights(self._row(context).copy())

    async def batch_logw_next(self, contexts):
        self.batch_calls += 1
        self.contexts_seen += len(contexts)
        return self.rows_to_weights(np.stack([self._row(c) for c in contexts]))

    def spawn(self):
        return BigramLM(self.vocab, {k: np.exp(v) for k, v in self.table.items()}, tables=self.tables)


def ab_lm() -> BigramLM:
    """A bigram LM over `a`, `b` with EOS mass at every step."""
    return BigramLM(
        AB,
        {None: [0.5, 0.3, 0.2], b"a": [0.3, 0.4, 0.3], b"b": [0.5, 0.1, 0.4]},
    )


class BoolPotential(Potential):
    """A Boolean potential: `prefix = 0` when `prefix_ok(ctx)`, `complete = 0` when
    `complete_ok(ctx)`, `-inf` otherwise."""

    def __init__(self, vocab, prefix_ok: Callable, complete_ok: Callable, tables=None):
        super().__init__(vocab, tables=tables)
        self.prefix_ok = prefix_ok
        self.complete_ok = complete_ok
        self.batch_calls = 0

    async def prefix(self, context):
        return 0.0 if self.prefix_ok(list(context)) else -math.inf

    async def complete(self, context):
        return 0.0 if self.complete_ok(list(context)) else -math.inf

    async def batch_score(self, contexts):
        self.batch_calls += 1
        return await super().batch_score(contexts)

    async def batch_logw_next(self, contexts):
        self.batch_calls += 1
        return await super().batch_logw_next(contexts)


class NoBB(Potential):
    """Boolean: no two `b`s in a row; complete when empty or ending in `b`."""

    def __init__(self, vocab=AB):
        super().__init__(vocab)

    @staticmethod
    def prefix_ok(ctx) -> bool:
        return all(not (x == b"b" and y == b"b") for x, y in zip(ctx, ctx[1:]))

    @staticmethod
    def complete_ok(ctx) -> bool:
        return NoBB.prefix_ok(ctx) and (not ctx or ctx[-1] == b"b")

    async def prefix(self, context):
        return 0.0 if self.prefix_ok(context) else -math.inf

    async def complete(self, context):
        return 0.0 if self.complete_ok(context) else -math.inf


def no_bb() -> BoolPotential:
    """`NoBB`'s language as a `BoolPotential` (which counts its batch calls)."""
    return BoolPotential(AB, NoBB.prefix_ok, NoBB.complete_ok)


class CountCritic(Potential):
    """A real-valued critic over `AB`: `prefix = -per_b·#b`,
    `complete = -per_b_complete·#b - odd·[odd length]`."""

    def __init__(self, per_b: float = 0.7, per_b_complete: float = 1.2, odd: float = 0.0):
        super().__init__(AB)
        self.per_b, self.per_b_complete, self.odd = per_b, per_b_complete, odd

    async def prefix(self, context):
        return -self.per_b * context.count(b"b")

    async def complete(self, context):
        return -self.per_b_complete * context.count(b"b") - self.odd * (len(context) % 2)


class Failing(Potential):
    """Wraps a potential and raises `RuntimeError` on any context of length `at`."""

    def __init__(self, inner: Potential, at: int):
        super().__init__(tables=inner.tables)
        self.inner = inner
        self.at = at

    def _check(self, context):
        if len(context) == self.at:
            raise RuntimeError(f"boom at length {self.at}")

    async def prefix(self, context):
        self._check(context)
        return await self.inner.prefix(context)

    async def complete(self, context):
        self._check(context)
        return await self.inner.complete(context)

    async def logw_next(self, context):
        self._check(context)
        return await self.inner.logw_next(context)


class Poisoned(Potential):
    """Wraps a potential and sets `logw_next(ctx)[token] = value` after contexts of
    length `at` (NaN or +inf)."""

    def __init__(self, inner: Potential, token, value: float, at: int = 1):
        super().__init__(tables=inner.tables)
        self.inner, self.token, self.value, self.at = inner, token, value, at

    async def prefix(self, context):
        return await self.inner.prefix(context)

    async def complete(self, context):
        return await self.inner.complete(context)

    async def logw_next(self, context):
        row = (await self.inner.logw_next(context)).weights.copy()
        if len(context) == self.at:
            row[self.lookup[self.token]] = self.value
        return self.make_lazy_weights(row)


class ToyBackend:
    """A shared 'model' whose forwards are batched across prompts by one window, like
    a language-model backend serving spawned prompts."""

    def __init__(self, table: dict):
        self.table = {k: np.log(np.asarray(v, dtype=np.float64)) for k, v in table.items()}
        self.forwards = 0
        self._window = Window(self._forward)

    async def _forward(self, requests):
        self.forwards += 1
        return [[self.table[ctx[-1] if ctx else prompt] for ctx in ctxs] for prompt, ctxs in requests]

    async def rows(self, prompt, contexts):
        return await self._window.submit((prompt, contexts))


class PromptedToy(BigramLM):
    """A bigram LM whose first row depends on a prompt, served by a `ToyBackend`."""

    def __init__(self, backend: ToyBackend, prompt, tables=None):
        Potential.__init__(self, AB, tables=tables)
        self.backend, self.prompt = backend, prompt
        self.table = dict(backend.table)
        self.table[None] = backend.table[prompt]
        self.batch_calls = 0
        self.contexts_seen = 0

    async def batch_logw_next(self, contexts):
        self.batch_calls += 1
        return self.rows_to_weights(np.stack(await self.backend.rows(self.prompt, list(contexts))))

    def spawn_with(self, prompt) -> "PromptedToy":
        return PromptedToy(self.backend, prompt, tables=self.tables)


def toy_backend() -> ToyBackend:
    return ToyBackend(
        {
            "p1": [0.7, 0.1, 0.2],
            "p2": [0.1, 0.6, 0.3],
            "p3": [0.4, 0.4, 0.2],
            b"a": [0.3, 0.4, 0.3],
            b"b": [0.5, 0.1, 0.4],
        }
    )


async def enumerate_target(weight, vocab, max_tokens: int) -> dict:
    """`{tuple(xs) + (EOS,): exp(weight(xs))}` over every `xs` with `len(xs) < max_tokens`
    and positive weight; `weight` is an async log weight of a complete sequence."""
    out = {}
    for n in range(max_tokens):
        for xs in itertools.product(vocab, repeat=n):
            w = math.exp(await weight(list(xs)))
            if w > 0:
                out[xs + (EOS,)] = w
    return out
