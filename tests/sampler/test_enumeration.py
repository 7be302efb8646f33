"""The enumeration helper itself: exact on hand-computed samplers, and it catches faults."""

import math

import pytest

from genlm.control.testing import (
    PathLimitExceeded,
    assert_properly_weighted,
    assert_weights_match,
    enumerate_sampler,
)


class TwoCoins:
    """Flips a 0.3/0.7 coin, then on heads a 0.5/0.5 coin; weight depends on the path."""

    def __init__(self, weights, logp_error=0.0):
        self.weights = weights
        self.logp_error = logp_error

    async def sample(self, context, draw=None):
        first = draw({"h": 0.3, "t": 0.7})
        if first == "t":
            return "x", math.log(self.weights["t"]), math.log(0.7) + self.logp_error
        second = draw({"x": 0.5, "y": 0.5, "never": 0.0})
        return second, math.log(self.weights["h" + second]), math.log(0.15) + self.logp_error


async def test_enumeration_sums_path_probability_times_weight():
    got = await enumerate_sampler(TwoCoins({"t": 2.0, "hx": 4.0, "hy": 6.0}), [])
    assert set(got) == {"x", "y"}
    assert math.exp(got["x"]) == pytest.approx(0.7 * 2.0 + 0.15 * 4.0)
    assert math.exp(got["y"]) == pytest.approx(0.15 * 6.0)


async def test_assert_properly_weighted_accepts_exact_and_rejects_wrong_weights():
    sampler = TwoCoins({"t": 2.0, "hx": 4.0, "hy": 6.0})
    exact = {"x": math.log(0.7 * 2.0 + 0.15 * 4.0), "y": math.log(0.15 * 6.0)}
    await assert_properly_weighted(sampler, [], expected=exact)
    with pytest.raises(AssertionError, match="not properly weighted"):
        await assert_properly_weighted(sampler, [], expected={**exact, "x": math.log(2.5)})


async def test_missing_tokens_count_as_zero_weight():
    assert_weights_match({"a": 0.0}, {"a": 0.0, "b": float("-inf")})
    with pytest.raises(AssertionError, match="'b'"):
        assert_weights_match({"a": 0.0}, {"a": 0.0, "b": 0.0})


async def test_path_limit():
    with pytest.raises(PathLimitExceeded):
        await enumerate_sampler(TwoCoins({"t": 1.0, "hx": 1.0, "hy": 1.0}), [], max_paths=2)


async def test_reported_logp_must_match_path_probability():
    with pytest.raises(ValueError, match="logp"):
        await enumerate_sampler(TwoCoins({"t": 1.0, "hx": 1.0, "hy": 1.0}, logp_error=0.1), [])


async def test_options_must_sum_to_one():
    class Bad:
        async def sample(self, context, draw=None):
            return draw({"a": 0.5, "b": 0.2}), 0.0, 0.0

    with pytest.raises(ValueError, match="sum to"):
        await enumerate_sampler(Bad(), [])
