"""`SMC(...)(..., end_twist=)`: a twist on unfinished particles that is 1 once they
finish, so it moves resampling only, never the target nor the estimate's mean.

The toy: the seeded bigram LM of tests/sampler/test_budget.py and a byte regex
coerced onto it; `Z` from `enumerate_target`.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from toys import BigramLM

from genlm.control import AWRS, BoolFSA, direct_token_sampler
from genlm.control.testing import enumerate_target

VOCAB = [b"a", b"b", b"ab", b"ba", b"."]
PATTERN = r"(a|b)(ab|ba){0,3}\."


def setup(seed: int = 4):
    rng = np.random.default_rng(seed)
    rows = {k: rng.dirichlet(np.ones(len(VOCAB) + 1)) for k in [None, *VOCAB]}
    lm = BigramLM(VOCAB, rows)
    return lm, BoolFSA.from_regex(PATTERN).coerce(lm, f=b"".join)


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_end_twist_keeps_smc_unbiased(name):
    """300 seeded runs at ESS 0.5 with a strong end twist: the mean of `Ẑ/Z` is
    within 4σ + 0.05 of 1."""
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition) if name == "direct" else AWRS(lm, condition)
    exact = asyncio.run(enumerate_target(lm, 7, condition=condition))

    async def runs():
        return await asyncio.gather(
            *(sampler.smc(4, 0.5, 7, seed=s, end_twist=0.05) for s in range(300))
        )

    ratios = np.exp([r.log_ml - exact.log_z for r in asyncio.run(runs())])
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * sigma + 0.05, (ratios.mean(), sigma)


def test_end_twist_is_divided_out_at_the_end():
    """One particle resampled at every step: the twist changes no weight it ends with
    (the same draws with and without it); several particles: it changes resampling."""
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition)

    async def run(n, twist, seed):
        return await sampler.smc(n, 1.0, 7, seed=seed, end_twist=twist)

    for seed in range(5):
        plain, twisted = asyncio.run(run(1, None, seed)), asyncio.run(run(1, 1e-3, seed))
        assert twisted.contexts == plain.contexts
        assert twisted.log_ml == pytest.approx(plain.log_ml, abs=1e-9)
    changed = [
        asyncio.run(run(8, None, s)).contexts != asyncio.run(run(8, 1e-3, s)).contexts
        for s in range(8)
    ]
    assert any(changed)


def test_end_twist_is_inert_without_resampling():
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition)
    plain = asyncio.run(sampler.smc(6, 0.0, 7, seed=3))
    twisted = asyncio.run(sampler.smc(6, 0.0, 7, seed=3, end_twist=1e-3))
    assert twisted.log_weights.tolist() == plain.log_weights.tolist()


@pytest.mark.parametrize(
    "bad, error",
    [(0, ValueError), (1.5, ValueError), (-0.1, ValueError), (True, TypeError), ("0.1", TypeError)],
)
def test_end_twist_must_be_a_factor(bad, error):
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition)
    with pytest.raises(error, match="end_twist"):
        asyncio.run(sampler.smc(2, 0.5, 5, end_twist=bad))
