"""Randomness is passed explicitly: no process-wide generator, and `AWRS(seed=)`
composes with the run's streams."""

from __future__ import annotations

import asyncio

import numpy as np
from pinned_runs import VOCAB, Bigram, NoDigitAfterVowel, digest

from genlm.control import AWRS, direct_token_sampler
from genlm.control.draw import context_rng, current_rng, draw_from, using_rng


def test_outside_a_run_each_draw_gets_a_fresh_generator():
    assert context_rng() is None
    a, b = current_rng(), current_rng()
    assert a is not b and isinstance(a, np.random.Generator)
    g = np.random.default_rng(0)
    with using_rng(g):
        assert current_rng() is g and context_rng() is g
    assert context_rng() is None


async def test_draw_from_outside_a_run_draws_the_row():
    """2000 draws from (0.2, 0.8, 0): the frequency of the first token is 0.2 within 4σ."""
    lm = Bigram(VOCAB[:2], seed=0)
    row = lm.make_lazy_weights(np.array([np.log(0.2), np.log(0.8), -np.inf]))
    n = 2000
    tokens = [(await draw_from(row)).token for _ in range(n)]
    freq = tokens.count(VOCAB[0]) / n
    assert abs(freq - 0.2) < 4 * np.sqrt(0.2 * 0.8 / n)
    assert set(tokens) <= {VOCAB[0], VOCAB[1]}


def _awrs(seed=None):
    return AWRS(Bigram(VOCAB, seed=3), NoDigitAfterVowel(VOCAB), seed=seed)


async def _run(sampler, seed):
    return digest(await sampler.smc(8, 0.5, 6, seed=seed))


async def test_awrs_seed_composes_with_the_run_seed():
    """Same (AWRS seed, run seed): the same run, also gathered on one sampler; another
    run seed or another AWRS seed changes the draws."""
    solo = await _run(_awrs(5), 0)
    sampler = _awrs(5)
    gathered = await asyncio.gather(_run(sampler, 1), _run(sampler, 0), _run(sampler, 2))
    assert gathered[1] == solo
    assert gathered[0][2] != solo[2] and gathered[2][2] != solo[2]
    assert (await _run(_awrs(6), 0))[2] != solo[2]
    assert (await _run(_awrs(None), 0))[2] != solo[2]


async def test_awrs_seed_alone_repeats_outside_a_run():
    async def draws(sampler):
        return [await sampler.sample([b"a"]) for _ in range(10)]

    assert await draws(_awrs(4)) == await draws(_awrs(4))
    assert await draws(_awrs(4)) != await draws(_awrs(9))


async def test_a_direct_sampler_run_ignores_an_outer_generator():
    """Inside SMC the particle's stream wins over a generator set around the run."""
    sampler = direct_token_sampler(Bigram(VOCAB, seed=3))
    plain = digest(await sampler.smc(6, 0.5, 5, seed=3))
    with using_rng(np.random.default_rng(123)):
        inside = digest(await sampler.smc(6, 0.5, 5, seed=3))
    assert inside == plain
