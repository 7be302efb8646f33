"""DirectTokenSampler: proper weighting by exact enumeration, zero mass, bad inputs, draws."""

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from toys.tables import LETTERS, NextTable, lm, toys

from genlm.control import EOS
from genlm.control.draw import using_rng
from genlm.control.sampler.token import DirectTokenSampler, TokenSampler, direct_token_sampler
from genlm.control.testing import assert_properly_weighted, enumerate_sampler

CONTEXTS = [[], ["a"], ["a", "a"]]


@settings(max_examples=30, deadline=None)
@given(toys)
def test_direct_sampler_is_properly_weighted(toy):
    async def check():
        sampler = DirectTokenSampler(toy.lm(), autobatch=toy.dead_root)
        for ctx in CONTEXTS:
            await assert_properly_weighted(sampler, ctx)

    asyncio.run(check())


@settings(max_examples=30, deadline=None)
@given(toys)
def test_direct_sampler_with_a_different_proposal_is_properly_weighted(toy):
    async def check():
        proposal = lm(toy.vocab, toy.seed + 1, p_zero=0.0)
        sampler = DirectTokenSampler(toy.lm(), proposal=proposal)
        for ctx in CONTEXTS:
            await assert_properly_weighted(sampler, ctx)

    asyncio.run(check())


async def test_a_row_without_mass_gives_eos_with_zero_weight():
    dead = NextTable(LETTERS[:3], lambda ctx: np.full(4, -np.inf))
    token, logw, logp = await direct_token_sampler(dead).sample([])
    assert (token, logw, logp) == (EOS, -np.inf, -np.inf)
    assert await enumerate_sampler(direct_token_sampler(dead), []) == {EOS: -np.inf}


async def test_proposal_vocabulary_must_match():
    with pytest.raises(ValueError, match="proposal's vocabulary"):
        DirectTokenSampler(lm(LETTERS[:3], 0), proposal=lm(LETTERS[:4], 0))


async def test_target_must_be_a_potential():
    class Fixed(TokenSampler):
        async def sample(self, context, draw=None):
            return EOS, 0.0, 0.0

    with pytest.raises(TypeError, match="Potential target"):
        Fixed("nope")


async def test_logw_eos_and_start_weight_follow_the_target():
    p = lm(LETTERS[:3], 4)
    sampler = direct_token_sampler(p)
    row = await p.logw_next(["b"])
    assert await sampler.logw_eos(["b"]) == row[EOS]
    assert await sampler.start_weight() == await p.prefix([])


async def test_seeded_draws_follow_the_normalized_row():
    p = lm(LETTERS[:4], 11)
    row = (await p.logw_next([])).normalize().exp()
    sampler = direct_token_sampler(p)
    n = 4000
    with using_rng(np.random.default_rng(0)):
        draws = await asyncio.gather(*(sampler.sample([]) for _ in range(n)))
    for token in p.vocab_eos:
        freq = sum(d[0] == token for d in draws) / n
        q = row[token]
        assert abs(freq - q) < 4 * np.sqrt(q * (1 - q) / n) + 1e-12
    log_total = (await p.logw_next([])).sum()
    assert all(d[1] == pytest.approx(log_total) for d in draws)
