"""Set samplers over a byte-token trie: proper weighting by exact enumeration."""

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.tables import LETTERS, NextTable, SetAsTokens, item_potential, lm, random_rows

from genlm.control import EOS
from genlm.control.draw import using_rng
from genlm.control.sampler.set import (
    EagerSetSampler,
    SetTokenSampler,
    TopKSetSampler,
    eager_token_sampler,
    topk_token_sampler,
)
from genlm.control.testing import assert_properly_weighted, enumerate_sampler, expected_logws

VOCABS = [
    [b"a", b"ab", b"b"],
    [b"a", b"ab", b"abc", b"b", b"ba", b"c"],
    [b"aa", b"a", b"b", b"bb", b"ab"],
]
CONTEXTS = [[], [b"a"], [b"b", b"a"]]


def llm_over(vocab, seed, p_zero):
    return NextTable(vocab, random_rows(len(vocab), seed, p_zero))


async def live_contexts(vocab, items):
    """The contexts over `vocab` whose bytes the item potential allows."""
    candidates = [c for c in CONTEXTS if set(c) <= set(vocab)]
    return [c for c in candidates if await items.prefix(list(b"".join(c))) > -np.inf]


settings_ = settings(max_examples=25, deadline=None)


@settings_
@given(
    st.sampled_from(VOCABS),
    st.integers(0, 2**16),
    st.sampled_from([0.0, 0.3]),
    st.sampled_from([0.0, 0.4, 0.8]),
    st.sampled_from(["eager", 1, 2, 10]),
)
def test_set_token_samplers_are_properly_weighted(vocab, seed, lm_zero, item_zero, kind):
    async def check():
        llm = llm_over(vocab, seed, lm_zero)
        items = item_potential(b"abc", seed + 1, item_zero)
        if kind == "eager":
            sampler = eager_token_sampler(llm, items)
        else:
            sampler = topk_token_sampler(llm, items, kind)
        for ctx in await live_contexts(vocab, items):
            await assert_properly_weighted(sampler, ctx)

    asyncio.run(check())


async def test_sets_are_properly_weighted_token_by_token():
    """E[Σ_{x∈S} ŵ(x) f(x)] = Σ t(x) f(x), checked on the sets themselves."""
    vocab = VOCABS[1]
    llm, items = llm_over(vocab, 5, 0.0), item_potential(b"abc", 3, 0.3)
    for set_sampler in (EagerSetSampler(llm, items), TopKSetSampler(llm, items, 2)):
        contexts = await live_contexts(vocab, items)
        assert len(contexts) > 1
        for ctx in contexts:
            got = await enumerate_sampler(SetAsTokens(set_sampler), ctx)
            exact = await expected_logws(SetTokenSampler(set_sampler), ctx)
            for token, v in exact.items():
                assert np.exp(got.get(token, -np.inf)) == pytest.approx(np.exp(v), rel=1e-9, abs=1e-12)


async def test_topk_covering_the_vocabulary_is_exact_with_one_path():
    vocab = VOCABS[1]
    llm, items = llm_over(vocab, 2, 0.0), item_potential(b"abc", 3, 0.3)
    s = await TopKSetSampler(llm, items, len(vocab)).sample_set([])
    assert s.logp == 0.0
    exact = await expected_logws(SetTokenSampler(TopKSetSampler(llm, items, 1)), [])
    got = dict(zip(s.tokens, s.logws))
    for token, v in exact.items():
        assert np.exp(got.get(token, -np.inf)) == pytest.approx(np.exp(v))


async def test_no_allowed_byte_leaves_only_eos():
    vocab = VOCABS[0]
    llm = llm_over(vocab, 1, 0.0)
    items = NextTable(list(b"ab"), lambda ctx: np.array([-np.inf, -np.inf, 0.0]))
    sampler = eager_token_sampler(llm, items)
    token, logw, _ = await sampler.sample([])
    assert token == EOS
    assert logw == pytest.approx((await llm.logw_next([]))[EOS])
    await assert_properly_weighted(sampler, [])


async def test_logw_eos_equals_the_target():
    llm, items = llm_over(VOCABS[2], 4, 0.0), item_potential(b"ab", 4, 0.2)
    sampler = eager_token_sampler(llm, items)
    target = await sampler.target.logw_next([b"a"])
    assert await sampler.logw_eos([b"a"]) == pytest.approx(target[EOS])


async def test_seeded_sampling_is_reproducible():
    llm, items = llm_over(VOCABS[1], 4, 0.0), item_potential(b"abc", 4, 0.2)
    sampler = topk_token_sampler(llm, items, 1)

    async def run():
        with using_rng(np.random.default_rng(5)):
            return [await sampler.sample([]) for _ in range(10)]

    assert await run() == await run()


def test_bad_inputs():
    llm, items = llm_over(VOCABS[0], 0, 0.0), item_potential(b"ab", 0)
    with pytest.raises(ValueError, match="K must be"):
        TopKSetSampler(llm, items, 0)
    with pytest.raises(ValueError, match="K must be"):
        topk_token_sampler(llm, items, -2)
    with pytest.raises(TypeError, match="byte strings"):
        EagerSetSampler(lm(LETTERS[:3], 0), items)
    with pytest.raises(TypeError, match="over bytes"):
        EagerSetSampler(llm, lm(LETTERS[:3], 0))
    with pytest.raises(TypeError, match="SetSampler"):
        SetTokenSampler(llm)


async def per_token_exact_logws(sampler, context, tokens) -> list[float]:
    """`log w(x) + Σ_d item.logw_next(β(ctx) + x[:d])[x_d]` token by token, stopping
    at the first zero (the definition `exact_logws` computes by one trie walk)."""
    w = (await sampler.iter_potential.logw_next(context)).weights
    items = list(b"".join(context))
    out = []
    for i in tokens:
        x, log_phi = sampler.iter_potential.vocab[i], 0.0
        for d, b in enumerate(x):
            if log_phi == -np.inf:
                break
            log_phi += (await sampler.item_potential.logw_next(items + list(x[:d])))[b]
        out.append(float(w[i]) + log_phi)
    return out


@settings_
@given(
    st.sampled_from(VOCABS), st.integers(0, 2**16), st.sampled_from([0.0, 0.4, 0.8]), st.sampled_from([0, 64]), st.data()
)
def test_exact_logws_equal_the_per_token_walk(vocab, seed, item_zero, few_paths, data):
    """Both walks (the trie's level walk, forced by `FEW_PATHS = 0`, and the per-path one)."""
    from genlm.control.sampler.set import _Walk

    async def check():
        llm = llm_over(vocab, seed, 0.0)
        items = item_potential(b"abc", seed + 1, item_zero)
        sampler = TopKSetSampler(llm, items, None)
        sampler.FEW_PATHS = few_paths
        for ctx in await live_contexts(vocab, items):
            tokens = data.draw(st.lists(st.integers(0, len(vocab) - 1), unique=True))
            view = _Walk(sampler, ctx, await sampler.iter_potential.logw_next(ctx))
            assert await sampler.exact_logws(view, tokens) == await per_token_exact_logws(sampler, ctx, tokens)

    asyncio.run(check())
