"""The AWRS rows of docs/bad-input.md: a condition or proposal whose vocabulary does
not hold the condition's tokens, a condition that is not Boolean (seen in a check, an
enumerated support or a whole row), and out-of-range search parameters."""

import math

import numpy as np
import pytest
from toys.reliability import AB, NoBB, ab_lm, assert_clear_error, undocumented

from genlm.control import AWRS, Potential
from genlm.control.constant import EndOfSequence

NEG_INF = float("-inf")


class Valued(Potential):
    """A condition over `vocab` whose prefix is `value` once a `b` appears."""

    def __init__(self, value: float, vocab=AB, cheap: bool = False):
        super().__init__(vocab)
        self.value = value
        self.cheap_logw_next = cheap

    async def prefix(self, context):
        return self.value if b"b" in context else 0.0

    async def complete(self, context):
        return await self.prefix(context)


def _sample(condition: Potential, enumerate_at: int = 0, seeds: int = 40):
    """Seeded samples after `[b"a"]` until one meets the condition's value."""

    async def run():
        sampler = AWRS(ab_lm(), condition)
        sampler.enumerate_at = enumerate_at
        for seed in range(seeds):
            sampler.rng = np.random.default_rng(seed)
            await sampler.sample([b"a"])

    return run()


ROWS = [
    ("awrs-proposal-lacks-condition-tokens", lambda: AWRS(ab_lm(), NoBB(), proposal=Valued(0.0, [b"a"])), ValueError, "subset of the proposal's"),
    ("awrs-condition-eos-differs", lambda: AWRS(ab_lm(), _OtherEos()), ValueError, "different markers"),
    ("awrs-max-rejects-zero", lambda: AWRS(ab_lm(), NoBB(), max_rejects=0), ValueError, "max_rejects"),
    ("awrs-max-rejects-float", lambda: AWRS(ab_lm(), NoBB(), max_rejects=2.5), ValueError, "max_rejects"),
    ("awrs-monte-carlo-zero", lambda: AWRS(ab_lm(), NoBB(), n_monte_carlo_samples=0), ValueError, "n_monte_carlo_samples"),
    ("awrs-max-accepts-bool", lambda: AWRS(ab_lm(), NoBB(), max_accepts=True), TypeError, "max_accepts must be a number"),
    ("awrs-max-rejects-bool", lambda: AWRS(ab_lm(), NoBB(), max_rejects=True), TypeError, "max_rejects must be a number"),
    ("awrs-max-accepts-str", lambda: AWRS(ab_lm(), NoBB(), max_accepts="2"), ValueError, "max_accepts must be an integer"),
    ("awrs-estimator-unknown", lambda: AWRS(ab_lm(), NoBB(), estimator="haldane"), ValueError, "estimator must be 'race' or 'recursive'"),
    ("awrs-recursive-max-accepts", lambda: AWRS(ab_lm(), NoBB(), estimator="recursive", max_accepts=3), ValueError, "recursive estimator takes max_accepts=2"),
    ("awrs-proposal-not-potential", lambda: AWRS(ab_lm(), NoBB(), proposal="q"), TypeError, "proposal must be a Potential"),
    ("awrs-condition-weighted-search", lambda: _sample(Valued(-0.5)), ValueError, r"Boolean condition .*gave -0\.5"),
    ("awrs-condition-weighted-enumerated", lambda: _sample(Valued(0.7), enumerate_at=16), ValueError, r"gave 0\.7.*direct_token_sampler"),
    ("awrs-condition-weighted-row", lambda: _sample(Valued(-2.0, cheap=True)), ValueError, r"gave -2\.0"),
    ("awrs-condition-nan", lambda: _sample(Valued(math.nan)), ValueError, "gave nan"),
]


class _OtherEos(Potential):
    """A condition over `[b"a"]` that ends with another marker."""

    def __init__(self):
        super().__init__([b"a"], eos=EndOfSequence("END"))

    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return 0.0


@pytest.mark.parametrize("thunk, err, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
async def test_bad_awrs_input_gives_a_clear_error(thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_awrs_row_is_documented():
    missing = undocumented(r[0] for r in ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"


async def test_a_condition_over_part_of_the_vocabulary_is_accepted():
    """The documented non-error: tokens outside the condition have weight zero."""
    sampler = AWRS(ab_lm(), Valued(0.0, [b"a"]))
    for seed in range(10):
        sampler.rng = np.random.default_rng(seed)
        token, logw, _ = await sampler.sample([])
        assert token != b"b" and logw > NEG_INF
