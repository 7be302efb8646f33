"""AWRS: proper weighting by exact enumeration, the estimators, cost, bad inputs."""

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_toys import LETTERS, NextTable, condition, lm, toys

from genlm.control import EOS
from genlm.control.draw import using_rng
from genlm.control.sampler.awrs import (
    AWRS,
    haldane_estimate,
    monte_carlo_estimate,
    rao_blackwell_estimate,
    truncated_estimate,
)
from genlm.control.testing import assert_properly_weighted, enumerate_sampler, expected_logws

NEG_INF = float("-inf")
CONFIGS = [
    {},
    {"max_accepts": 1},
    {"max_accepts": 3},
    {"max_rejects": 1},
    {"max_rejects": 2, "max_accepts": 3},
    {"prune_logws": False},
    {"autobatch": False},
]


async def live_contexts(cond):
    """Contexts the condition allows (AWRS samples only after allowed tokens)."""
    candidates = [c for c in ([], ["a"], ["b", "a"]) if set(c) <= set(cond.vocab)]
    return [c for c in candidates if await cond.prefix(c) == 0.0]


@settings(max_examples=25, deadline=None)
@given(toys, st.sampled_from(CONFIGS))
def test_awrs_is_properly_weighted(toy, config):
    async def check():
        cond = toy.condition()
        sampler = AWRS(toy.lm(), cond, **config)
        for ctx in await live_contexts(cond):
            await assert_properly_weighted(sampler, ctx)

    asyncio.run(check())


@settings(max_examples=12, deadline=None)
@given(toys)
def test_awrs_with_a_different_proposal_is_properly_weighted(toy):
    async def check():
        cond = toy.condition()
        proposal = lm(toy.vocab, toy.seed + 1, p_zero=0.0)
        sampler = AWRS(toy.lm(), cond, proposal=proposal)
        for ctx in await live_contexts(cond):
            await assert_properly_weighted(sampler, ctx)

    asyncio.run(check())


async def test_all_rejected_gives_zero_weight_on_every_path():
    vocab = LETTERS[:4]
    sampler = AWRS(lm(vocab, 3), condition(vocab, 3, dead=frozenset({()})))
    got = await enumerate_sampler(sampler, [])
    assert got == {EOS: NEG_INF}
    token, logw, _ = await sampler.sample([])
    assert (token, logw) == (EOS, NEG_INF)


async def test_unconstrained_condition_costs_two_checks_and_gives_the_exact_weight():
    vocab = LETTERS[:5]
    p = lm(vocab, 8)
    allow_all = NextTable(vocab, lambda ctx: np.zeros(6))
    sampler = AWRS(p, allow_all, autobatch=False)
    log_total = (await p.logw_next([])).sum()
    for seed in range(20):
        with using_rng(np.random.default_rng(seed)):
            _, logw, _ = await sampler.sample([])
        assert logw == pytest.approx(log_total)  # Ẑ = 1/(1+0) exactly: zero variance
    checks = allow_all.calls["prefix"] + allow_all.calls["complete"]
    assert checks <= 2 * 20


async def test_condition_is_checked_only_on_drawn_tokens():
    vocab = [str(i) for i in range(200)]
    p = NextTable(vocab, lambda ctx: -0.05 * np.arange(201.0))
    allowed = np.where(np.arange(201) % 3 == 0, 0.0, NEG_INF)
    cond = NextTable(vocab, lambda ctx: allowed)
    sampler = AWRS(p, cond, seed=1, autobatch=False)
    for _ in range(20):
        await sampler.sample([])
    per_sample = (cond.calls["prefix"] + cond.calls["complete"]) / 20
    assert per_sample < 20  # far below the 201 entries of the row


async def test_seed_makes_runs_reproducible():
    vocab = LETTERS[:5]

    async def run(seed):
        s = AWRS(lm(vocab, 2), condition(vocab, 2, p_allow=0.5), seed=seed)
        return [await s.sample([]) for _ in range(10)]

    assert await run(7) == await run(7)


async def test_seeded_mean_weight_is_unbiased():
    vocab = LETTERS[:5]
    p, cond = lm(vocab, 21), condition(vocab, 21, p_allow=0.4)
    sampler = AWRS(p, cond, seed=3, autobatch=False)
    exact = await expected_logws(sampler, [])
    n = 1500
    draws = [await sampler.sample([]) for _ in range(n)]
    for token, logw_target in exact.items():
        ws = np.array([math.exp(w) if t == token else 0.0 for t, _, w in ((d[0], d[2], d[1]) for d in draws)])
        assert abs(ws.mean() - math.exp(logw_target)) < 4 * ws.std() / math.sqrt(n) + 1e-9


async def test_improper_weights_draw_the_exact_token_distribution():
    vocab = LETTERS[:4]
    p, cond = lm(vocab, 5), condition(vocab, 5, p_allow=0.5)
    sampler = AWRS(p, cond, proper_weights=False)
    exact = await expected_logws(sampler, [])
    z = sum(math.exp(v) for v in exact.values())

    class TokenLaw:
        """The same paths with weight one: enumeration then gives P(token)."""

        async def sample(self, context, draw=None):
            token, logw, logp = await sampler.sample(context, draw=draw)
            return token, (0.0 if logw > NEG_INF else NEG_INF), logp

    law = await enumerate_sampler(TokenLaw(), [])
    for token, v in exact.items():
        assert math.exp(law.get(token, NEG_INF)) == pytest.approx(math.exp(v) / z)
    weights = await enumerate_sampler(sampler, [])
    assert sum(math.exp(v) for v in weights.values()) >= z * (1 - 1e-9)  # biased upwards


def test_rao_blackwell_estimate_matches_the_series():
    s = np.array([1.0, 0.7, 0.7, 0.2, 0.05])
    for m, r in [(2, 0), (2, 3), (3, 1), (4, 5)]:
        # E[(m-1)/(m-1+r+S)], S a sum of Geometric(s_j) failures, by truncated convolution.
        n = 4000
        dist = np.zeros(n)
        dist[0] = 1.0
        for sj in s[s < 1]:
            g = sj * (1 - sj) ** np.arange(n)
            dist = np.convolve(dist, g)[:n]
        series = float(np.sum(dist * (m - 1) / (m - 1 + r + np.arange(n))))
        assert rao_blackwell_estimate(m, r, s) == pytest.approx(series, rel=1e-9)
    assert rao_blackwell_estimate(1, 0, s) == 1.0
    assert rao_blackwell_estimate(1, 2, s) == 0.0


def test_rao_blackwell_estimate_with_many_masses_matches_the_series():
    # 60 masses: the factors of the integrand are multiplied in groups before the log.
    s = np.sort(np.random.default_rng(3).uniform(0.4, 1.0, 60))[::-1]
    m, r, n = 2, 58, 3000
    dist = np.zeros(n)
    dist[0] = 1.0
    for sj in s:
        dist = np.convolve(dist, sj * (1 - sj) ** np.arange(n))[:n]
    series = float(np.sum(dist * (m - 1) / (m - 1 + r + np.arange(n))))
    assert rao_blackwell_estimate(m, r, s) == pytest.approx(series, rel=1e-9)


@pytest.mark.parametrize("scale", [0.05, 1.0, 20.0, 300.0])
def test_log_factors_of_many_masses_match_the_direct_sum(scale):
    # Series in the power sums where every c_j u ≤ 1e-3, grouped products elsewhere.
    from genlm.control.sampler.awrs import _grid, _log_factors

    rng = np.random.default_rng(int(scale * 10))
    s = np.exp(-rng.exponential(scale, size=500))
    s = s[(s < 1.0) & (s > 1e-290)]
    c = (1.0 - s) / s
    for panels in (10, 30, 90):
        u = _grid(panels)[2]
        direct = np.log1p(c[:, None] * u[None, :]).sum(axis=0)
        assert np.allclose(_log_factors(c, u), direct, rtol=1e-10, atol=1e-300)


def test_monte_carlo_estimate_is_centred_on_the_exact_one():
    s = np.array([0.6, 0.3, 0.3])
    rng = np.random.default_rng(0)
    sims = np.array([monte_carlo_estimate(rng, 2, 2, s, 1) for _ in range(4000)])
    exact = rao_blackwell_estimate(2, 2, s)
    assert abs(sims.mean() - exact) < 4 * sims.std() / math.sqrt(len(sims))


def test_sequential_plan_estimators():
    assert haldane_estimate(2, 0) == 1.0
    assert haldane_estimate(2, 3) == 0.25
    assert haldane_estimate(1, 1) == 0.0
    assert truncated_estimate(2, 1, 2, 5) == 0.5
    assert truncated_estimate(1, 5, 2, 5) == 1 / 5
    assert truncated_estimate(0, 5, 2, 5) == 0.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_accepts": 0}, "max_accepts"),
        ({"max_accepts": 1.5}, "max_accepts"),
        ({"max_rejects": 0}, "max_rejects"),
        ({"n_monte_carlo_samples": 0}, "n_monte_carlo_samples"),
    ],
)
def test_bad_parameters(kwargs, message):
    vocab = LETTERS[:3]
    with pytest.raises(ValueError, match=message):
        AWRS(lm(vocab, 0), condition(vocab, 0), **kwargs)


def test_vocabulary_mismatch_names_the_culprit():
    with pytest.raises(ValueError, match="condition's vocabulary"):
        AWRS(lm(LETTERS[:3], 0), condition(LETTERS[:4], 0))
    with pytest.raises(ValueError, match="proposal's vocabulary"):
        AWRS(lm(LETTERS[:3], 0), condition(LETTERS[:3], 0), proposal=lm(LETTERS[:2], 0))


async def test_logw_eos_is_the_product_target():
    vocab = LETTERS[:3]
    p, cond = lm(vocab, 9), condition(vocab, 9, p_allow=1.0)
    sampler = AWRS(p, cond)
    assert await sampler.logw_eos([]) == pytest.approx((await p.logw_next([]))[EOS])


def test_rao_blackwell_estimate_with_tiny_unknown_mass():
    # Two draws at unknown mass ε: S ≈ Gamma(2, 1/ε), so E[1/(4+S)] ≈ ε.
    eps = 1e-12
    assert rao_blackwell_estimate(2, 3, np.array([eps, eps])) == pytest.approx(eps, rel=1e-6)


async def test_monte_carlo_weights_are_unbiased_and_exact_under_enumeration():
    vocab = LETTERS[:4]
    p, cond = lm(vocab, 13), condition(vocab, 13, p_allow=0.5)
    sampler = AWRS(p, cond, n_monte_carlo_samples=4, seed=0, autobatch=False)
    await assert_properly_weighted(sampler, [])  # with draw, the exact integral is used
    exact = await expected_logws(sampler, [])
    total = sum(math.exp(v) for v in exact.values())
    ws = np.array([math.exp((await sampler.sample([]))[1]) for _ in range(1500)])
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(len(ws)) + 1e-12
