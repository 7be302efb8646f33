"""`SMC(...)(..., end_twist=)`: a twist on unfinished particles that is 1 once they
finish, so it moves resampling only, never the target nor the estimate's mean.

By default (None) the charge on an unfinished particle is the cost of ending after its
own context (the EOS entry of the pricing potential's row, clipped); a number is a
constant charge; False or 1 turns the twist off.

The toys: the seeded bigram LM of tests/sampler/test_budget.py and a byte regex
coerced onto it, `ab_lm() * no_bb()`, and a random table LM with a random Boolean
condition (tests/toys/tables.py); `Z` from `enumerate_target`.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from toys import BigramLM, ab_lm, no_bb
from toys import tables as table_toys

from genlm.control import AWRS, BoolFSA, direct_token_sampler
from genlm.control.smc.particle import SequenceModel
from genlm.control.smc.step import END_TWIST_FLOOR, end_costs, propose
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
        plain = asyncio.run(run(1, False, seed))
        for twist in (1e-3, None):
            twisted = asyncio.run(run(1, twist, seed))
            assert twisted.contexts == plain.contexts
            assert twisted.log_ml == pytest.approx(plain.log_ml, abs=1e-9)
    for twist in (1e-3, None):
        changed = [
            asyncio.run(run(8, False, s)).contexts != asyncio.run(run(8, twist, s)).contexts
            for s in range(8)
        ]
        assert any(changed), twist


def test_end_twist_is_inert_without_resampling():
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition)
    plain = asyncio.run(sampler.smc(6, 0.0, 7, seed=3))
    twisted = asyncio.run(sampler.smc(6, 0.0, 7, seed=3, end_twist=1e-3))
    assert twisted.log_weights.tolist() == plain.log_weights.tolist()


@pytest.mark.parametrize(
    "bad, error",
    [
        (0, ValueError),
        (1.5, ValueError),
        (-0.1, ValueError),
        (True, TypeError),
        ("0.1", TypeError),
        (np.False_, TypeError),
    ],
)
def test_end_twist_must_be_a_factor(bad, error):
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition)
    with pytest.raises(error, match="end_twist"):
        asyncio.run(sampler.smc(2, 0.5, 5, end_twist=bad))


# The default twist: the cost of ending after the particle's own context ------------


def _bigram(kind):
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition) if kind == "direct" else AWRS(lm, condition)
    return sampler, lambda: enumerate_target(lm, 7, condition=condition), 7


def _ab(kind):
    assert kind == "direct"  # no_bb declares no Boolean fast path: both factors price
    target = ab_lm() * no_bb()
    return direct_token_sampler(target), lambda: enumerate_target(target, 5), 5


def _tables(kind):
    vocab = table_toys.LETTERS[:3]
    lm, condition = table_toys.lm(vocab, 11), table_toys.condition(vocab, 11, p_allow=0.7)
    sampler = direct_token_sampler(lm * condition) if kind == "direct" else AWRS(lm, condition)
    return sampler, lambda: enumerate_target(lm, 5, condition=condition), 5


TOYS = {"bigram": _bigram, "ab": _ab, "tables": _tables}
CASES = [("bigram", "direct"), ("bigram", "awrs"), ("ab", "direct"), ("tables", "direct"), ("tables", "awrs")]


@pytest.mark.filterwarnings("ignore::genlm.control.smc.deaths.ZeroWeightWarning")
@pytest.mark.parametrize("toy, kind", CASES)
def test_default_end_twist_keeps_smc_unbiased(toy, kind):
    """300 seeded runs at ESS 0.5 with the default twist, against exact enumeration:
    the mean of `Ẑ/Z` is within 4σ + 0.05 of 1, and the twist is on (some runs
    resample otherwise than with `end_twist=False`)."""
    sampler, exact, max_tokens = TOYS[toy](kind)
    exact = asyncio.run(exact())

    async def runs(**extra):
        return await asyncio.gather(
            *(sampler.smc(4, 0.5, max_tokens, seed=s, **extra) for s in range(300))
        )

    out = asyncio.run(runs())
    ratios = np.exp([r.log_ml - exact.log_z for r in out])
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * sigma + 0.05, (ratios.mean(), sigma)
    off = asyncio.run(runs(end_twist=False))
    assert any(a.contexts != b.contexts for a, b in zip(out, off))


@pytest.mark.parametrize("toy, kind", CASES)
def test_default_end_twist_is_given_back(toy, kind):
    """The returned log weights are the untwisted ones: with a threshold that never
    resamples (ESS ≥ 1 > 1e-9 · N), the draws are those of `end_twist=False` and so is
    every final weight, though each step charged the unfinished particles."""
    sampler, _, max_tokens = TOYS[toy](kind)
    for seed in range(4):
        twisted = asyncio.run(sampler.smc(6, 1e-9, max_tokens, seed=seed))
        plain = asyncio.run(sampler.smc(6, 1e-9, max_tokens, seed=seed, end_twist=False))
        assert twisted.contexts == plain.contexts
        np.testing.assert_allclose(twisted.log_weights, plain.log_weights, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["direct", "awrs"])
def test_default_charge_is_the_cost_of_ending_after_the_context(kind):
    """One step: an unfinished proposal's twist is the LM's EOS entry after its new
    context, clipped to [1e-9, 1] (the condition, which forbids EOS there, adds
    nothing); a finished one's is 0."""
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition) if kind == "direct" else AWRS(lm, condition)
    model = SequenceModel(sampler, max_tokens=7, end_twist=None)
    contexts = [(), (b"a",), (b"a", b"ab"), (b"b", b"ba")]
    rngs = [np.random.default_rng(s) for s in range(len(contexts))]
    out = asyncio.run(propose(model, contexts, np.zeros(len(contexts)), rngs))
    for context, twist, end, logw in zip(out.contexts, out.twists, out.ends, out.logws):
        assert logw > -math.inf
        if end:
            assert twist == 0.0
            continue
        eos = float(asyncio.run(lm.logw_next(list(context)))[lm.eos])
        assert twist == pytest.approx(min(max(eos, END_TWIST_FLOOR), 0.0), abs=1e-12)
    assert not all(out.ends)


def test_end_costs_clip_and_skip_what_forbids_ending():
    """`end_costs` sums the pricing factors' finite EOS entries, clipped to
    [END_TWIST_FLOOR, 0]; 0 where no factor allows EOS; None for a lone potential
    (it prices its own prefixes: no default twist)."""
    vocab = [b"a", b"b"]
    rows = {
        None: np.array([0.5, 0.5, 0.0]),
        b"a": np.array([0.5, 0.5, 1e-15]),  # below the floor
        b"b": np.array([0.2, 0.2, 0.6]),
    }
    lm = BigramLM(vocab, {k: v / v.sum() for k, v in rows.items()})
    lm.table[b"b"][-1] = 5.0  # an unnormalized EOS weight above 1: clipped to 0
    condition = BoolFSA.from_regex(r"(a|b)+").coerce(lm, f=b"".join)
    got = asyncio.run(end_costs(direct_token_sampler(lm * condition), [[], [b"a"], [b"b"]]))
    assert got.tolist() == [0.0, END_TWIST_FLOOR, 0.0]  # [] : EOS weight zero everywhere
    assert asyncio.run(end_costs(direct_token_sampler(lm), [[b"a"]])) is None


def test_off_is_false_or_one_and_a_lone_potential_has_no_default_twist():
    lm, condition = setup()
    sampler = direct_token_sampler(lm * condition)
    for seed in range(4):
        a = asyncio.run(sampler.smc(6, 0.5, 7, seed=seed, end_twist=False))
        b = asyncio.run(sampler.smc(6, 0.5, 7, seed=seed, end_twist=1))
        assert a.contexts == b.contexts and a.log_weights.tolist() == b.log_weights.tolist()
    alone = direct_token_sampler(lm)
    for seed in range(4):
        a = asyncio.run(alone.smc(6, 0.5, 7, seed=seed))
        b = asyncio.run(alone.smc(6, 0.5, 7, seed=seed, end_twist=False))
        assert a.contexts == b.contexts and a.log_weights.tolist() == b.log_weights.tolist()


def test_default_twist_costs_one_row_call_of_the_lm_per_step():
    """The charge reads one more batched row of the pricing potential per step (the
    LM; never the condition), for all the run's unfinished particles at once."""
    calls = {}
    for twist in (False, None):
        lm, condition = setup()
        sampler = direct_token_sampler(lm * condition)
        asyncio.run(sampler.smc(8, 0.5, 7, seed=0, end_twist=twist))
        calls[twist] = lm.batch_calls
    assert calls[False] <= 7 and calls[False] < calls[None] <= 2 * calls[False]


def test_a_potential_without_rows_is_charged_complete_minus_prefix():
    """A factor defining only `prefix` and `complete` is priced by their difference,
    its EOS entry by the potential contract, without a derived row."""
    from genlm.control import Potential

    class Unigram(Potential):
        async def prefix(self, context):
            return math.log(0.3) * len(context)

        async def complete(self, context):
            return math.log(0.3) * len(context) + math.log(1e-3)

    lm = Unigram([b"a", b"b"])
    condition = BoolFSA.from_regex(r"(a|b)+").coerce(lm, f=b"".join)
    got = asyncio.run(end_costs(direct_token_sampler(lm * condition), [[b"a"], [b"a", b"b"]]))
    np.testing.assert_allclose(got, math.log(1e-3), rtol=0, atol=1e-12)
