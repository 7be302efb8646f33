"""Seeded SMC runs on self-contained numpy toys, pinned to a few ulps.

`RUNS` maps a name to a coroutine function returning a `Sequences`; the values in
`test_pinned_runs.py` were recorded from these runs before the SMC code moved into
`genlm.control.smc`, so agreement proves the move changed no draw and no weight.
The toys live here (not in the shared toy modules) so that edits to those cannot
move the pins.
"""

from __future__ import annotations

import math

import numpy as np

from genlm.control import AWRS, Potential, direct_token_sampler, eager_token_sampler
from genlm.control.sampler import FixedLengthBoundary, MultiTokenUnitSampler
from genlm.control.sampler.sequence import SMC

VOCAB = [bytes([c]) for c in b"abcdefghijklmnopqrstuvwxyz0123456789"]  # 36 tokens


class Bigram(Potential):
    """`p(x_i | x_{i-1})`: fixed random rows over `vocab + [EOS]` (seeded Dirichlet)."""

    def __init__(self, vocab, seed: int, eos_mass: float = 0.15):
        super().__init__(vocab)
        gen = np.random.default_rng(seed)
        n = len(vocab)
        rows = gen.dirichlet(np.full(n, 0.3), size=n + 1) * (1 - eos_mass)
        self.rows = np.log(np.column_stack([rows, np.full(n + 1, eos_mass)]))

    def _row(self, context) -> np.ndarray:
        return self.rows[self.lookup[context[-1]] + 1 if context else 0]

    def _path(self, context) -> float:
        return float(sum(self._row(context[:i])[self.lookup[x]] for i, x in enumerate(context)))

    async def prefix(self, context):
        return self._path(context)

    async def complete(self, context):
        return self._path(context) + float(self._row(context)[-1])

    async def logw_next(self, context):
        return self.make_lazy_weights(self._row(context).copy())

    async def batch_logw_next(self, contexts):
        return self.rows_to_weights(np.stack([self._row(c) for c in contexts]))


class NoDigitAfterVowel(Potential):
    """Boolean, prefix/complete only (AWRS searches): no digit right after a vowel;
    complete when the last token is not a vowel."""

    @staticmethod
    def _ok(context) -> bool:
        return not any(x in b"aeiou" and y.isdigit() for x, y in zip(context, context[1:]))

    async def prefix(self, context):
        return 0.0 if self._ok(context) else -math.inf

    async def complete(self, context):
        ok = self._ok(context) and not (context and context[-1] in (b"a", b"e", b"i", b"o", b"u"))
        return 0.0 if ok else -math.inf


class Letters(Potential):
    """A critic: `prefix = -0.3·#digits`, `complete = -0.5·#digits`."""

    async def prefix(self, context):
        return -0.3 * sum(x.isdigit() for x in context)

    async def complete(self, context):
        return -0.5 * sum(x.isdigit() for x in context)


class Bytes(Potential):
    """An item potential over bytes: weights fixed per previous byte."""

    def __init__(self, seed: int):
        super().__init__(list(b"abcdefghijklmnopqrstuvwxyz0123456789"))
        gen = np.random.default_rng(seed)
        n = len(self.vocab)
        rows = gen.dirichlet(np.full(n, 2.0), size=n + 1) * 0.9
        self.rows = np.log(np.column_stack([rows, np.full(n + 1, 0.1)]))

    def _row(self, context) -> np.ndarray:
        return self.rows[self.lookup[context[-1]] + 1 if context else 0]

    async def prefix(self, context):
        return float(sum(self._row(context[:i])[self.lookup[x]] for i, x in enumerate(context)))

    async def complete(self, context):
        return await self.prefix(context) + float(self._row(context)[-1])


def _lm() -> Bigram:
    return Bigram(VOCAB, seed=3)


async def direct_ess_half():
    return await SMC(direct_token_sampler(_lm()))(12, 0.5, 8, seed=0)


async def direct_always_systematic():
    return await SMC(direct_token_sampler(_lm()))(9, 1.0, 6, seed=4, resampling_method="systematic")


async def direct_never_residual():
    return await SMC(direct_token_sampler(_lm()))(7, 0.0, 5, seed=5, resampling_method="residual")


async def critic_stratified():
    return await direct_token_sampler(_lm()).smc(10, 0.5, 7, critic=Letters(VOCAB), seed=1, resampling_method="stratified")


# The AWRS runs were recorded before SMC's default end twist (docs/smc.md, "When a few
# runs carry the mean"), which changes which particles resampling keeps: they pin the
# untwisted algorithm, `end_twist=False`.
async def awrs_search():
    return await AWRS(_lm(), NoDigitAfterVowel(VOCAB)).smc(10, 0.5, 7, seed=2, end_twist=False)


async def awrs_recursive_critic():
    sampler = AWRS(_lm(), NoDigitAfterVowel(VOCAB), estimator="recursive")
    return await sampler.smc(8, 0.7, 6, critic=Letters(VOCAB), seed=6, end_twist=False)


async def multi_token_units():
    unit = MultiTokenUnitSampler(direct_token_sampler(_lm()), FixedLengthBoundary(2))
    return await SMC(unit, Letters(VOCAB))(8, 0.5, 4, seed=7)


async def eager_set_sampler():
    return await eager_token_sampler(_lm(), Bytes(seed=8)).smc(6, 0.5, 5, seed=8)


async def terminate_when_z():
    stop = lambda ctx: ctx[-1] in (b"z", b"9")  # noqa: E731
    return await SMC(direct_token_sampler(_lm()))(10, 0.5, 9, seed=9, terminate_when=stop)


RUNS = {
    "direct_ess_half": direct_ess_half,
    "direct_always_systematic": direct_always_systematic,
    "direct_never_residual": direct_never_residual,
    "critic_stratified": critic_stratified,
    "awrs_search": awrs_search,
    "awrs_recursive_critic": awrs_recursive_critic,
    "multi_token_units": multi_token_units,
    "eager_set_sampler": eager_set_sampler,
    "terminate_when_z": terminate_when_z,
}


def digest(seqs) -> tuple[str, list[str], str]:
    """`(log_ml.hex(), [w.hex() for w in log_weights], contexts as text)`."""
    from genlm.control.util import flatten_units

    text = "|".join(
        b"".join(t if isinstance(t, bytes) else b"$" for t in flatten_units(c)).decode() for c in seqs.contexts
    )
    return float(seqs.log_ml).hex(), [float(w).hex() for w in seqs.log_weights], text
