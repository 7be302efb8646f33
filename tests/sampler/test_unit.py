"""Multi-token units: exact enumeration of unit weights, boundaries, flattening, bad inputs."""

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.tables import LETTERS, NextTable, lm, random_rows, toy_strategy, toys

from genlm.control import EOS
from genlm.control.draw import using_rng
from genlm.control.sampler.awrs import AWRS
from genlm.control.sampler.token import direct_token_sampler
from genlm.control.sampler.unit import (
    CFGBoundary,
    FixedLengthBoundary,
    MultiTokenUnitSampler,
    TokenSetBoundary,
    flatten_units,
)
from genlm.control.testing import assert_properly_weighted

NEG_INF = float("-inf")


async def unit_weights(sampler: MultiTokenUnitSampler, context: list) -> dict:
    """Σ over complete units of Π target.logw_next along the unit, by recursion over the target."""
    target, tokens = sampler.target, flatten_units(context)
    out: dict = {}

    async def grow(unit, logw):
        row = await target.logw_next(tokens + unit)
        for x, w in zip(row.decode, row.weights):
            if w == NEG_INF:
                continue
            u = unit + [x]
            if x == EOS or await sampler._ends(context, u):
                out[tuple(u)] = logw + w
            elif len(u) < sampler.max_subunits_per_unit:
                await grow(u, logw + w)
            # a unit capped without a boundary has weight zero

    await grow([], 0.0)
    return out


class BalancedAB:
    """A Boolean 'grammar' over bytes: complete iff the bytes are a nonempty run of
    `a`s followed by as many `b`s."""

    async def complete(self, items):
        s = bytes(items)
        n = len(s) // 2
        return 0.0 if s and len(s) % 2 == 0 and s == b"a" * n + b"b" * n else NEG_INF


BOUNDARIES = [
    FixedLengthBoundary(2),
    FixedLengthBoundary(1),
    TokenSetBoundary(["b"]),
    TokenSetBoundary(["a", "c"]),
]


@settings(max_examples=25, deadline=None)
@given(toys, st.sampled_from(BOUNDARIES))
def test_units_of_direct_subunits_are_properly_weighted(toy, boundary):
    async def check():
        sampler = MultiTokenUnitSampler(direct_token_sampler(toy.lm()), boundary, max_subunits_per_unit=3)
        for ctx in ([], [["a"]], [["a", "a"], ["a"]]):
            await assert_properly_weighted(sampler, ctx, expected=await unit_weights(sampler, ctx))

    asyncio.run(check())


@settings(max_examples=15, deadline=None)
@given(toy_strategy(3))
def test_units_of_awrs_subunits_are_properly_weighted(toy):
    async def check():
        sub = AWRS(toy.lm(), toy.condition())
        sampler = MultiTokenUnitSampler(sub, FixedLengthBoundary(2), max_subunits_per_unit=2)
        await assert_properly_weighted(sampler, [], expected=await unit_weights(sampler, []))

    asyncio.run(check())


async def test_cfg_boundary_ends_units_at_complete_sentences():
    vocab = [b"a", b"b", b"ab"]
    llm = NextTable(vocab, random_rows(3, 4, 0.0))
    boundary = CFGBoundary(BalancedAB())
    assert await boundary([], [b"a", b"b"])
    assert await boundary([], [b"ab"])
    assert not await boundary([], [b"a", b"a", b"b"])
    assert not await boundary([], [b"b", b"a"])
    sampler = MultiTokenUnitSampler(direct_token_sampler(llm), boundary, max_subunits_per_unit=4)
    got = await assert_properly_weighted(sampler, [], expected=await unit_weights(sampler, []))
    assert (b"ab",) in got and (b"a", b"b") in got


async def test_units_end_at_eos_and_flatten_to_the_token_sequence():
    p = lm(LETTERS[:2], 1)
    sampler = MultiTokenUnitSampler(direct_token_sampler(p), FixedLengthBoundary(50), max_subunits_per_unit=50)
    with using_rng(np.random.default_rng(0)):
        unit, logw, _ = await sampler.sample([["a"]])
    assert unit[-1] == EOS or len(unit) == 50
    tokens = flatten_units([["a"], unit])
    assert tokens == ["a", *unit]
    sums = [(await p.logw_next(tokens[:i])).sum() for i in range(1, len(tokens))]
    assert logw == pytest.approx(sum(sums))  # the direct sampler weighs each draw by log Σw


async def test_max_subunits_caps_the_unit_with_weight_zero():
    """A unit with no boundary within the cap is no unit: weight -inf (as in 0.4.1)."""
    p = NextTable(LETTERS[:2], lambda ctx: np.array([0.0, 0.0, NEG_INF]))
    sampler = MultiTokenUnitSampler(direct_token_sampler(p), lambda ctx, u: False, max_subunits_per_unit=4)
    unit, logw, logp = await sampler.sample([])
    assert len(unit) == 4 and logw == NEG_INF
    assert logp == pytest.approx(4 * math.log(0.5))
    # a boundary on the last allowed subunit still makes a unit
    ends_at_4 = MultiTokenUnitSampler(direct_token_sampler(p), FixedLengthBoundary(4), max_subunits_per_unit=4)
    unit, logw, _ = await ends_at_4.sample([])
    assert len(unit) == 4 and logw == pytest.approx(4 * math.log(2.0))


async def test_logw_eos_and_start_weight_use_the_flattened_context():
    p = lm(LETTERS[:3], 2)
    sampler = MultiTokenUnitSampler(direct_token_sampler(p), FixedLengthBoundary(2))
    assert await sampler.logw_eos([["a", "b"], ["c"]]) == (await p.logw_next(["a", "b", "c"]))[EOS]
    assert await sampler.start_weight() == await p.prefix([])


def test_flatten_units():
    assert flatten_units([["a", "b"], ["c"], "d", [EOS]]) == ["a", "b", "c", "d", EOS]
    assert flatten_units([]) == []


def test_bad_inputs():
    sub = direct_token_sampler(lm(LETTERS[:2], 0))
    with pytest.raises(ValueError, match="max_subunits_per_unit"):
        MultiTokenUnitSampler(sub, FixedLengthBoundary(2), max_subunits_per_unit=0)
    with pytest.raises(TypeError, match="TokenSampler"):
        MultiTokenUnitSampler(lm(LETTERS[:2], 0), FixedLengthBoundary(2))
    with pytest.raises(TypeError, match="callable"):
        MultiTokenUnitSampler(sub, "newline")
    with pytest.raises(ValueError, match="length"):
        FixedLengthBoundary(0)
    with pytest.raises(ValueError, match="boundary token"):
        TokenSetBoundary([])
    with pytest.raises(TypeError, match="complete"):
        CFGBoundary(object())
