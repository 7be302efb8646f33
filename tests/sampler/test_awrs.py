"""AWRS: proper weighting by exact enumeration, the estimators, cost, bad inputs."""

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.tables import LETTERS, NextTable, condition, lm, toys

from genlm.control import EOS
from genlm.control.draw import using_rng
from genlm.control.sampler._awrs_estimates import (
    log_inclusion_estimate,
    log_series_sum,
    monte_carlo_inclusion,
)
from genlm.control.sampler.awrs import AWRS
from genlm.control.testing import assert_properly_weighted, enumerate_sampler, expected_logws

NEG_INF = float("-inf")
CONFIGS = [
    {},
    {"estimator": "recursive"},
    {"max_accepts": 1},
    {"max_accepts": 3},
    {"max_accepts": 4},
    {"max_rejects": 1},
    {"max_rejects": 2, "max_accepts": 3},
    {"prune_logws": False},
    {"autobatch": False},
]


def searching(sampler: AWRS, enumerate_at: int = 0) -> AWRS:
    """`sampler` with supports above `enumerate_at` tokens searched (0: always)."""
    sampler.enumerate_at = enumerate_at
    return sampler


def awrs(p, cond, **config) -> AWRS:
    return searching(AWRS(p, cond, **{k: v for k, v in config.items() if k != "enumerate_at"}),
                     config.get("enumerate_at", 0))


async def live_contexts(cond):
    """Contexts the condition allows (AWRS samples only after allowed tokens)."""
    candidates = [c for c in ([], ["a"], ["b", "a"]) if set(c) <= set(cond.vocab)]
    return [c for c in candidates if await cond.prefix(c) == 0.0]


@settings(max_examples=25, deadline=None)
@given(toys, st.sampled_from(CONFIGS))
def test_awrs_is_properly_weighted(toy, config):
    async def check():
        cond = toy.condition()
        sampler = awrs(toy.lm(), cond, **config)
        for ctx in await live_contexts(cond):
            await assert_properly_weighted(sampler, ctx)

    asyncio.run(check())


@settings(max_examples=12, deadline=None)
@given(toys)
def test_awrs_with_a_different_proposal_is_properly_weighted(toy):
    async def check():
        cond = toy.condition()
        proposal = lm(toy.vocab, toy.seed + 1, p_zero=0.0)
        sampler = awrs(toy.lm(), cond, proposal=proposal)
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
    sampler = awrs(p, allow_all, autobatch=False)
    log_total = (await p.logw_next([])).sum()
    for seed in range(20):
        with using_rng(np.random.default_rng(seed)):
            _, logw, _ = await sampler.sample([])
        assert logw == pytest.approx(log_total)  # φ = 1 for masses [1, 1 - q_x]: zero variance
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
        s = searching(AWRS(lm(vocab, 2), condition(vocab, 2, p_allow=0.5), seed=seed))
        return [await s.sample([]) for _ in range(10)]

    assert await run(7) == await run(7)


async def test_seeded_mean_weight_is_unbiased():
    vocab = LETTERS[:5]
    p, cond = lm(vocab, 21), condition(vocab, 21, p_allow=0.4)
    sampler = searching(AWRS(p, cond, seed=3, autobatch=False))
    exact = await expected_logws(sampler, [])
    n = 1500
    draws = [await sampler.sample([]) for _ in range(n)]
    for token, logw_target in exact.items():
        ws = np.array([math.exp(w) if t == token else 0.0 for t, _, w in ((d[0], d[2], d[1]) for d in draws)])
        assert abs(ws.mean() - math.exp(logw_target)) < 4 * ws.std() / math.sqrt(n) + 1e-9


async def test_improper_weights_draw_the_exact_token_distribution():
    vocab = LETTERS[:4]
    p, cond = lm(vocab, 5), condition(vocab, 5, p_allow=0.5)
    sampler = searching(AWRS(p, cond, proper_weights=False))
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
    # every accepted draw has weight one (0.4.1's improper weights), so enumerating the
    # sampler's weighted paths gives the token law itself, not the target's masses
    weights = await enumerate_sampler(sampler, [])
    assert weights.keys() == law.keys()
    for token, v in law.items():
        assert math.exp(weights[token]) == pytest.approx(math.exp(v))
    assert sum(math.exp(v) for v in weights.values()) == pytest.approx(1.0)
    assert z != pytest.approx(1.0)  # the target's mass differs: the weights ignore it


def _digamma_sum(r):
    """`log Σ_n Π_j 1/(1 + n r_j)` by partial fractions over the poles `-1/r_j`:
    `Π_j 1/(n + b_j) = Σ_j A_j/(n + b_j)` and `Σ_n Σ_j A_j/(n + b_j) = -Σ_j A_j ψ(b_j)`."""
    from mpmath import digamma, fprod, log, mp, mpf

    mp.dps = 60
    b = [1 / mpf(float(x)) for x in r]
    total = 0
    for j, bj in enumerate(b):
        total -= fprod([1 / (bk - bj) for k, bk in enumerate(b) if k != j]) * digamma(bj)
    return float(log(total * fprod([1 / mpf(float(x)) for x in r])))


def test_series_sum_matches_partial_fractions():
    rng = np.random.default_rng(0)
    for _ in range(120):
        r = np.exp(rng.uniform(-15.0, 4.0, int(rng.integers(2, 9))))
        assert log_series_sum(np.log(r)) == pytest.approx(_digamma_sum(r), abs=1e-10)


@pytest.mark.parametrize("x", [1e-300, 1e-12, 1e-3, 0.05, 1.0, 7.0, 1e6])
@pytest.mark.parametrize("j", [2, 5])
def test_series_sum_of_equal_rates_is_a_hurwitz_zeta(x, j):
    # Σ_n (1 + n x)^(-j) = x^(-j) ζ(j, 1/x); for x → 0 it tends to 1/((j-1) x).
    from mpmath import log, mpf, zeta

    want = float(log(zeta(j, 1 / mpf(x))) - j * log(mpf(x)))
    assert log_series_sum(np.full(j, math.log(x))) == pytest.approx(want, abs=1e-10)


def test_series_sum_needs_two_factors():
    with pytest.raises(ValueError, match="two factors"):
        log_series_sum(np.array([0.0]))


def test_inclusion_estimate_is_the_mean_over_the_race_times():
    # φ = E[q / (1 - exp(-q τ))], τ = Σ_j E_j / M_j: simulated, within 4σ.
    q, masses = 0.01, np.array([1.0, 0.5, 0.2, 0.05, 0.02])
    rng = np.random.default_rng(1)
    tau = (rng.standard_exponential((400_000, 5)) / masses).sum(axis=1)
    sims = q / -np.expm1(-q * tau)
    exact = math.exp(log_inclusion_estimate(q, masses))
    assert abs(sims.mean() - exact) < 4 * sims.std() / math.sqrt(len(sims))
    mc = np.array([math.exp(monte_carlo_inclusion(rng, q, masses, 1)) for _ in range(4000)])
    assert abs(mc.mean() - exact) < 4 * mc.std() / math.sqrt(len(mc))


def test_inclusion_estimate_spans_the_float_range():
    # Masses from 1e-300 to 1: log space throughout, finite and ≥ q.
    masses = np.array([1.0, 0.6, 1e-3, 1e-30, 1e-100, 1e-300])
    for q in (1e-300, 1e-150, 1e-3, 0.5):
        got = log_inclusion_estimate(q, masses[masses >= q])
        assert math.isfinite(got) and got >= math.log(q) - 1e-12


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
    with pytest.raises(ValueError, match="subset of the potential's: 1 of its 4 tokens"):
        AWRS(lm(LETTERS[:3], 0), condition(LETTERS[:4], 0))
    with pytest.raises(ValueError, match="subset of the proposal's"):
        AWRS(lm(LETTERS[:3], 0), condition(LETTERS[:3], 0), proposal=lm(LETTERS[:2], 0))


async def test_logw_eos_is_the_product_target():
    vocab = LETTERS[:3]
    p, cond = lm(vocab, 9), condition(vocab, 9, p_allow=1.0)
    sampler = AWRS(p, cond)
    assert await sampler.logw_eos([]) == pytest.approx((await p.logw_next([]))[EOS])


async def test_monte_carlo_weights_are_unbiased_and_exact_under_enumeration():
    vocab = LETTERS[:4]
    p, cond = lm(vocab, 13), condition(vocab, 13, p_allow=0.5)
    with pytest.warns(DeprecationWarning, match="n_monte_carlo_samples"):  # 0.4.1's warning
        sampler = searching(AWRS(p, cond, n_monte_carlo_samples=4, seed=0, autobatch=False))
    await assert_properly_weighted(sampler, [])  # with draw, the exact integral is used
    exact = await expected_logws(sampler, [])
    total = sum(math.exp(v) for v in exact.values())
    ws = np.array([math.exp((await sampler.sample([]))[1]) for _ in range(1500)])
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(len(ws)) + 1e-12
