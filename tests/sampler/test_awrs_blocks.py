"""AWRS with a condition that answers a set of next tokens at once (`allowed_next`):
its draws come in blocks. Exact enumeration shows the block path properly weighted
and with the same law of (token, weight) as the token-by-token path; seeded runs
check the Generator's draws, block growth and the array walk."""

import asyncio
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toys.tables import LETTERS, NextTable, lm, random_masks, toy_strategy

from genlm.control import EOS
from genlm.control.sampler.awrs import AWRS
from genlm.control.testing import assert_properly_weighted, enumerate_sampler, expected_logws

NEG_INF = float("-inf")


class SetCondition(NextTable):
    """A toy condition with `allowed_next` from its own `prefix` and `complete`."""

    async def allowed_next(self, context, indices):
        self.calls["allowed_next"] = self.calls.get("allowed_next", 0) + 1
        out = []
        for i in indices:
            x = self.vocab_eos[int(i)]
            if x == EOS:
                out.append(self._prefix(context) + self._row(context)[-1] > NEG_INF)
            else:
                out.append(self._prefix(list(context) + [x]) > NEG_INF)
        return out

    def spawn(self):
        return SetCondition(self.vocab, self.row, tables=self.tables)


def set_condition(toy) -> SetCondition:
    plain = toy.condition()
    return SetCondition(plain.vocab, plain.row)


@pytest.fixture(params=[(2, 1), (2, 100), (3, 100)], ids=["2-array", "2-python", "3-python"])
def blocks(request, monkeypatch):
    """Small blocks (enumerable), walked in numpy (`vector_walk=1`) or in Python."""
    size, vector_walk = request.param
    monkeypatch.setattr(AWRS, "block_size", size)
    monkeypatch.setattr(AWRS, "max_block", size)
    monkeypatch.setattr(AWRS, "vector_walk", vector_walk)
    monkeypatch.setattr(AWRS, "enumerate_at", 0)  # the toys are small: search them
    return request.param


async def live_contexts(cond):
    candidates = [c for c in ([], ["a"], ["b", "a"]) if set(c) <= set(cond.vocab)]
    return [c for c in candidates if await cond.prefix(c) == 0.0]


class Law:
    """`sampler`'s paths with weight `w**power` (power 0: the token's probability)."""

    def __init__(self, sampler, power):
        self.sampler, self.power = sampler, power

    async def sample(self, context, draw=None):
        token, logw, logp = await self.sampler.sample(context, draw=draw)
        if logw == NEG_INF:
            return token, NEG_INF, logp
        return token, self.power * logw, logp


CONFIGS = [
    {},
    {"max_accepts": 1},
    {"max_accepts": 3},
    {"estimator": "recursive"},
    {"max_rejects": 2},
    {"proper_weights": False},
    {"autobatch": False},
]
small_toys = toy_strategy(3)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(small_toys, st.sampled_from(CONFIGS))
def test_blocks_have_the_law_of_token_by_token_draws(blocks, toy, config):
    """P(token), E[w; token] and E[w²; token] agree exactly with the per-token path,
    and with `proper_weights` the block path is properly weighted."""

    async def check():
        cond = set_condition(toy)
        by_block, by_token = AWRS(toy.lm(), cond, **config), AWRS(toy.lm(), toy.condition(), **config)
        contexts = await live_contexts(cond)
        cond.calls["prefix"] = 0
        for ctx in contexts:
            for power in (0, 1, 2):
                got = await enumerate_sampler(Law(by_block, power), ctx)
                want = await enumerate_sampler(Law(by_token, power), ctx)
                for x in set(got) | set(want):
                    a, b = math.exp(got.get(x, NEG_INF)), math.exp(want.get(x, NEG_INF))
                    assert a == pytest.approx(b, rel=1e-6, abs=1e-12), (ctx, x, power)
            if config.get("proper_weights", True):
                await assert_properly_weighted(by_block, ctx)
        assert cond.calls["prefix"] == cond.calls["complete"] == 0  # only allowed_next

    asyncio.run(check())


async def test_blocks_with_a_different_proposal_are_properly_weighted(blocks):
    vocab = LETTERS[:3]
    for seed in range(4):
        cond = SetCondition(vocab, random_masks(3, seed, 0.5))
        sampler = AWRS(lm(vocab, seed), cond, proposal=lm(vocab, seed + 1))
        for ctx in await live_contexts(cond):
            await assert_properly_weighted(sampler, ctx)


async def test_allowed_next_replaces_the_per_token_checks():
    p, cond = wide_toy(50, 0.3, 3)
    sampler = AWRS(p, cond, seed=0)
    for _ in range(5):
        await sampler.sample([])
    assert cond.calls["allowed_next"] >= 5 and cond.calls["prefix"] == cond.calls["complete"] == 0


async def test_a_capped_search_is_checked_in_blocks(blocks):
    vocab = LETTERS[:4]
    for seed in range(4):
        cond = SetCondition(vocab, random_masks(4, seed, 0.5))
        for cap in (1, 2):
            await assert_properly_weighted(AWRS(lm(vocab, seed), cond, max_rejects=cap), [])
        assert cond.calls["allowed_next"] > 0 and cond.calls["prefix"] == 0


def wide_toy(n: int, p_allow: float, seed: int):
    """A proposal over `n` tokens that puts most mass on rejected tokens."""
    vocab = [f"t{i}" for i in range(n)]
    rng = np.random.default_rng(seed)
    allowed = np.where(rng.random(n + 1) < p_allow, 0.0, NEG_INF)
    allowed[0] = 0.0
    logits = rng.normal(size=n + 1) * 2 + np.where(allowed == 0, -3.0, 0.0)
    return NextTable(vocab, lambda ctx: logits), SetCondition(vocab, lambda ctx: allowed)


@pytest.mark.parametrize("vector_walk", [1, 64, 10**6])
async def test_seeded_block_weights_are_unbiased_under_heavy_rejection(vector_walk, monkeypatch):
    """Hundreds of rejects per search: blocks grow and (vector_walk 1 or 64) are walked
    in numpy. The mean weight of each token matches its target weight within 4σ."""
    monkeypatch.setattr(AWRS, "vector_walk", vector_walk)
    p, cond = wide_toy(400, 0.05, 1)
    sampler = AWRS(p, cond, seed=5, autobatch=False)
    exact = await expected_logws(sampler, [])
    n = 600
    draws = [await sampler.sample([]) for _ in range(n)]
    total = sum(math.exp(v) for v in exact.values())
    ws = np.array([math.exp(w) for _, w, _ in draws])
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(n)
    assert all(exact[t] > NEG_INF for t, w, _ in draws if w > NEG_INF)  # allowed tokens only
    top = max(exact, key=exact.get)
    hit = np.array([math.exp(w) if t == top else 0.0 for t, w, _ in draws])
    assert abs(hit.mean() - math.exp(exact[top])) < 4 * hit.std() / math.sqrt(n) + 1e-12


async def test_seeded_block_tokens_follow_the_constrained_proposal():
    """proper_weights=False: the token is an exact draw from q restricted to A."""
    p, cond = wide_toy(60, 0.3, 2)
    sampler = AWRS(p, cond, seed=9, proper_weights=False, autobatch=False)
    exact = await expected_logws(sampler, [])
    z = sum(math.exp(v) for v in exact.values())
    n = 3000
    tokens = [(await sampler.sample([]))[0] for _ in range(n)]
    for x, v in exact.items():
        prob = math.exp(v) / z
        freq = sum(t == x for t in tokens) / n
        assert abs(freq - prob) < 4 * math.sqrt(prob * (1 - prob) / n) + 1e-9, x


async def test_seeded_runs_repeat():
    p, cond = wide_toy(100, 0.2, 4)

    async def run():
        s = AWRS(p, cond, seed=11)
        return [await s.sample([]) for _ in range(20)]

    assert await run() == await run()


class Joint:
    """`sampler`'s outcome `(token, weight)` as the token, with weight one: exact
    enumeration then gives the law of the pair (weights rounded to 9 digits)."""

    def __init__(self, sampler):
        self.sampler = sampler

    async def sample(self, context, draw=None):
        token, logw, logp = await self.sampler.sample(context, draw=draw)
        return (token, float(f"{math.exp(logw):.9g}")), 0.0, logp


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_the_race_has_the_law_of_the_walk(seed, monkeypatch):
    """After a first block of two draws, a Generator-driven search finishes by the
    exponential race. The law of (token, weight) is enumerated exactly on the block
    path (a `draw` callback never races) and matched by the race's frequencies."""
    monkeypatch.setattr(AWRS, "block_size", 2)
    monkeypatch.setattr(AWRS, "max_block", 2)
    monkeypatch.setattr(AWRS, "race_after", 0)
    vocab = LETTERS[:4]
    cond = SetCondition(vocab, random_masks(4, seed, 0.4))
    sampler = AWRS(lm(vocab, seed), cond, seed=seed, autobatch=False)
    exact = {k: math.exp(v) for k, v in (await enumerate_sampler(Joint(sampler), [])).items()}
    n = 5000
    outcomes = Counter([(await Joint(sampler).sample([]))[0] for _ in range(n)])
    assert set(outcomes) <= set(exact)
    for key, p in exact.items():
        freq = outcomes[key] / n
        assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (key, freq, p)


@pytest.mark.parametrize("race_after", [0, 4, 10**9])
async def test_race_or_not_the_weights_are_unbiased(race_after, monkeypatch):
    monkeypatch.setattr(AWRS, "race_after", race_after)
    p, cond = wide_toy(300, 0.2, 6)
    sampler = AWRS(p, cond, seed=2, autobatch=False)
    exact = await expected_logws(sampler, [])
    total = sum(math.exp(v) for v in exact.values())
    n = 1500
    draws = [await sampler.sample([]) for _ in range(n)]
    ws = np.array([math.exp(w) for _, w, _ in draws])
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(n)
    assert all(exact[t] > NEG_INF for t, w, _ in draws if w > NEG_INF)


async def test_race_with_a_different_proposal_is_unbiased(monkeypatch):
    monkeypatch.setattr(AWRS, "race_after", 0)
    p, cond = wide_toy(200, 0.2, 8)
    logits = np.random.default_rng(9).normal(size=201)
    proposal = NextTable(p.vocab, lambda ctx: logits)
    sampler = AWRS(p, cond, proposal=proposal, seed=4, autobatch=False)
    exact = await expected_logws(sampler, [])
    total = sum(math.exp(v) for v in exact.values())
    n = 1500
    ws = np.array([math.exp((await sampler.sample([]))[1]) for _ in range(n)])
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(n)
