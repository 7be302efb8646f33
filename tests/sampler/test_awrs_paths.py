"""AWRS's three paths (exact rows, enumerated small supports, the race search), a
condition over part of the potential's vocabulary, masses down to 1e-300 and
non-Boolean conditions. Proper weighting is checked by exact enumeration."""

import math

import numpy as np
import pytest
from toys.tables import LETTERS, NextTable, lm, random_masks

from genlm.control import EOS
from genlm.control.sampler.awrs import AWRS
from genlm.control.sampler.token import DirectTokenSampler
from genlm.control.testing import assert_properly_weighted, enumerate_sampler, expected_logws

NEG_INF = float("-inf")
PATHS = ["exact", "enumerated", "search"]


class CheapTable(NextTable):
    """A condition whose whole row is cheap (as an engine mask or a cached DFA row)."""

    cheap_logw_next = True

    async def batch_logw_next(self, contexts):
        self.calls["batch_logw_next"] = self.calls.get("batch_logw_next", 0) + 1
        return self.rows_to_weights(np.stack([self._row(c) for c in contexts]))


class CountedTable(NextTable):
    async def batch_logw_next(self, contexts):
        self.calls["batch_logw_next"] = self.calls.get("batch_logw_next", 0) + 1
        return self.rows_to_weights(np.stack([self._row(c) for c in contexts]))


def on_path(path: str, p, vocab, row, **kwargs) -> AWRS:
    """AWRS over `p` with a condition on `vocab` given by `row`, forced onto `path`."""
    cond = (CheapTable if path == "exact" else NextTable)(vocab, row)
    sampler = AWRS(p, cond, **kwargs)
    sampler.enumerate_at = 0 if path == "search" else 16
    return sampler


class Joint:
    """`(token, weight)` as the outcome, with weight one: enumeration gives its law."""

    def __init__(self, sampler):
        self.sampler = sampler

    async def sample(self, context, draw=None):
        token, logw, logp = await self.sampler.sample(context, draw=draw)
        return (token, float(f"{math.exp(logw):.9g}")), 0.0, logp


async def live(cond, contexts=([], ["a"], ["b", "a"])):
    return [c for c in contexts if set(c) <= set(cond.vocab) and await cond.prefix(c) == 0.0]


@pytest.mark.parametrize("seed", range(6))
async def test_a_cheap_condition_gives_the_law_and_weights_of_the_direct_sampler(seed):
    vocab = LETTERS[:5]
    p, cond = lm(vocab, seed, p_zero=0.2), CheapTable(vocab, random_masks(5, seed, 0.5))
    sampler, direct = AWRS(p, cond), DirectTokenSampler(p * cond)
    with_proposal = AWRS(p, cond, proposal=lm(vocab, seed + 1))  # q restricted to A
    contexts = await live(cond)
    cond.calls.update(prefix=0, complete=0)
    for ctx in contexts:
        got = await enumerate_sampler(Joint(sampler), ctx)
        want = await enumerate_sampler(Joint(direct), ctx)
        assert got.keys() == want.keys()
        for k in got:
            assert math.exp(got[k]) == pytest.approx(math.exp(want[k]), rel=1e-9)
        await assert_properly_weighted(sampler, ctx)
        await assert_properly_weighted(with_proposal, ctx)
    assert cond.calls["prefix"] == cond.calls["complete"] == 0  # rows only


async def test_batch_sample_is_one_row_call_per_batch_and_repeats_the_direct_draws():
    vocab = LETTERS[:5]
    p, cond = CountedTable(vocab, lm(vocab, 3).row), CheapTable(vocab, random_masks(5, 3, 0.6))
    contexts = await live(cond, ([], ["a"], ["b"], ["c"], ["a", "b"], ["e", "d"]))
    assert len(contexts) >= 3
    sampler, direct = AWRS(p, cond), DirectTokenSampler(p * cond)
    got = await sampler.batch_sample(contexts, [np.random.default_rng(i) for i in range(len(contexts))])
    assert p.calls["batch_logw_next"] == 1 and cond.calls["batch_logw_next"] == 1
    want = await direct.batch_sample(contexts, [np.random.default_rng(i) for i in range(len(contexts))])
    assert [t for t, _, _ in got] == [t for t, _, _ in want]
    assert np.allclose([w for _, w, _ in got], [w for _, w, _ in want], rtol=1e-12)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", range(4))
async def test_a_condition_over_part_of_the_vocabulary(path, seed):
    """Tokens outside the condition's vocabulary have weight zero, as in `p * cond`."""
    vocab, part = LETTERS[:5], ["e", "a", "c"]  # in another order, too
    p = lm(vocab, seed)
    sampler = on_path(path, p, part, random_masks(3, seed, 0.6))
    for ctx in await live(sampler.condition):
        got = await assert_properly_weighted(sampler, ctx)
        assert {k for k, v in got.items() if v > NEG_INF} <= {*part, EOS}


@pytest.mark.parametrize("path", PATHS)
async def test_a_proposal_over_part_of_the_vocabulary(path):
    vocab, part = LETTERS[:5], ["a", "b", "d"]
    sampler = on_path(path, lm(vocab, 4), part, random_masks(3, 4, 0.6), proposal=lm(["d", "a", "b", "c"], 5))
    await assert_properly_weighted(sampler, [])


def spanning(n: int, seed: int):
    """A row with weights from 1e-300 to 1, and a condition allowing the tiniest."""
    rng = np.random.default_rng(seed)
    logw = rng.permutation(np.linspace(math.log(1e-300), 0.0, n + 1))
    allowed = np.where(logw < math.log(1e-200), 0.0, NEG_INF)
    return NextTable([f"t{i}" for i in range(n)], lambda ctx: logw), (lambda ctx: allowed)


@pytest.mark.parametrize("path", PATHS)
async def test_masses_down_to_1e_300_are_properly_weighted(path):
    """Allowed mass ~1e-200 of the proposal: every mass is summed, never subtracted to 0."""
    p, row = spanning(5, 1)
    sampler = on_path(path, p, p.vocab, row)
    got = await enumerate_sampler(sampler, [])
    want = await expected_logws(sampler, [])
    for k, v in want.items():
        if v > NEG_INF:
            assert got[k] == pytest.approx(v, abs=1e-7), k
        else:
            assert got.get(k, NEG_INF) == NEG_INF
    with np.errstate(invalid="raise"):
        for seed in range(20):
            s = on_path(path, p, p.vocab, row, seed=seed, autobatch=False)
            token, logw, _ = await s.sample([])
            assert math.isfinite(logw) and want[token] > NEG_INF


async def test_a_long_search_at_tiny_masses_stays_finite_and_unbiased():
    """120 tokens from 1e-300 to 1, the allowed ones below 1e-200: seeded mean weight
    relative to the exact target, within 4σ."""
    p, row = spanning(120, 2)
    sampler = on_path("search", p, p.vocab, row, seed=3, autobatch=False)
    want = await expected_logws(sampler, [])
    top = max(want.values())
    ws = np.array([math.exp((await sampler.sample([]))[1] - top) for _ in range(300)])
    total = sum(math.exp(v - top) for v in want.values())
    assert np.all(np.isfinite(ws)) and np.all(ws > 0)
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(len(ws)) + 1e-12


def weighted(value: float):
    """A condition row allowing `a` and `b` with log weight `value` and the rest 0."""
    return lambda ctx: np.array([value, value, 0.0, NEG_INF, 0.0, 0.0])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("value", [-0.5, 0.3, float("nan")])
async def test_a_non_boolean_condition_is_refused(path, value):
    vocab = LETTERS[:5]
    sampler = on_path(path, lm(vocab, 1), vocab, weighted(value))
    with pytest.raises(ValueError, match=r"Boolean condition .*direct_token_sampler\(potential \* condition\)"):
        for seed in range(30):  # the search meets a or b on some path
            await sampler.sample([], draw=_first_of(seed))


def _first_of(seed: int):
    rng = np.random.default_rng(seed)

    def draw(options):
        keys = list(options)
        return keys[int(rng.integers(len(keys)))]

    return draw


async def test_smc_with_a_cheap_condition_repeats_the_direct_sampler_run():
    vocab = LETTERS[:5]
    p, cond = lm(vocab, 2), CheapTable(vocab, random_masks(5, 2, 0.7))
    args = dict(n_particles=6, ess_threshold=0.5, max_tokens=5, seed=1)
    a = await AWRS(p, cond).smc(**args)
    b = await DirectTokenSampler(p * cond).smc(**args)
    assert a.contexts == b.contexts
    assert np.allclose(a.log_weights, b.log_weights, rtol=1e-12)


async def test_the_recursive_search_is_exact_for_one_allowed_token_and_stops_after_it():
    """One allowed token among 400, of proposal mass 0.05: the recursive search
    (`estimator="recursive"`) returns it with the exact weight every time,
    having checked the tokens drawn before it and one more; the race estimator
    (`max_accepts=3`) checks all 400 (and EOS) to find a second accept."""
    n, mass = 400, 0.05
    vocab = [f"t{i}" for i in range(n)]
    logq = np.log(np.full(n + 1, (1 - mass) / n))
    logq[7] = math.log(mass)
    p = NextTable(vocab, lambda ctx: logq)
    row = np.full(n + 1, NEG_INF)
    row[7] = 0.0

    async def run(seed, **kwargs):
        sampler = on_path("search", p, vocab, lambda ctx: row, seed=seed, autobatch=False, **kwargs)
        sampler.condition = cond = NextTable(vocab, lambda ctx: row, tables=p.tables)
        token, logw, _ = await sampler.sample([])
        assert token == "t7"
        return logw, cond.calls["prefix"] + cond.calls["complete"]

    checks = []
    for seed in range(30):
        logw, n_checks = await run(seed, estimator="recursive")
        assert logw == pytest.approx(math.log(mass), abs=1e-9)
        checks.append(n_checks)
    assert np.mean(checks) < 100, checks
    assert [(await run(seed))[1] for seed in range(3)] == [n + 1] * 3
