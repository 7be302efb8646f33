import asyncio
import math
import warnings

import numpy as np
import pytest
from genlm.backend.tokenization import Token
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.core import Tabular, random_tabular

from genlm.control import AWRS, EOS, Potential
from genlm.control.potential import Coerced
from genlm.control.potential.coerce import _WARNED
from genlm.control.testing import check_potential

TOKENS = [b"a", b"ab", b"b", b"ba", b"c", b""]


def byte_tabular(rng, max_len=4):
    return random_tabular(list(b"abc"), rng, max_len=max_len, p_zero=0.2)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
async def test_trie_walk_equals_the_definition(seed):
    items = byte_tabular(np.random.default_rng(seed))
    walk = items.coerce(TOKENS, f=b"".join)
    plain = items.coerce(TOKENS, f=b"".join, homomorphic=False)
    assert walk.homomorphic and not plain.homomorphic
    for ctx in [[], [b"a"], [b"ab"], [b"b", b"a"]]:
        if await walk.prefix(ctx) == float("-inf"):
            continue
        got, want = await walk.logw_next(ctx), await plain.logw_next(ctx)
        np.testing.assert_allclose(got.weights, want.weights)
        for tok in TOKENS:
            expect = await items.prefix(list(b"".join(ctx + [tok]))) - await items.prefix(
                list(b"".join(ctx))
            )
            assert got[tok] == pytest.approx(expect) if expect > -np.inf else got[tok] == -np.inf
    await check_potential(walk, [[], [b"a"], [b"ab", b"c"]])


async def test_prefix_and_complete_map_through_f():
    items = Tabular(list(b"ab"), {tuple(b"ab"): 0.5, tuple(b"a"): 0.25, tuple(b"b"): 0.25})
    c = items.coerce([b"a", b"b", b"ab"], f=b"".join)
    assert await c.complete([b"a", b"b"]) == pytest.approx(math.log(0.5))
    assert await c.complete([b"ab"]) == pytest.approx(math.log(0.5))
    assert await c.prefix([b"a"]) == pytest.approx(math.log(0.75))
    w = await c.logw_next([b"a"])
    assert w[b"b"] == pytest.approx(math.log(0.5 / 0.75))
    assert w[EOS] == pytest.approx(math.log(0.25 / 0.75))


def test_prune_drops_tokens_outside_the_inner_vocabulary():
    items = Tabular(list(b"ab"), {tuple(b"a"): 1.0})
    c = items.coerce([b"a", b"b", b"c", b"ac"], f=b"".join)
    assert c.vocab == [b"a", b"b"]
    unpruned = items.coerce([b"a", b"b", b"c"], f=b"".join, prune=False)
    assert unpruned.vocab == [b"a", b"b", b"c"]


async def test_unpruned_tokens_outside_get_zero_weight():
    items = Tabular(list(b"ab"), {tuple(b"a"): 1.0, tuple(b"b"): 1.0})
    c = items.coerce([b"a", b"c"], f=b"".join, prune=False)
    w = await c.logw_next([])
    assert w[b"c"] == float("-inf")
    assert w[b"a"] == pytest.approx(math.log(0.5))


def test_coercion_with_no_token_in_vocabulary_is_an_error():
    items = Tabular(list(b"ab"), {tuple(b"a"): 1.0})
    with pytest.raises(ValueError, match="maps into the vocabulary"):
        items.coerce([b"x", b"yz"], f=b"".join)


def test_coercion_onto_a_potential_shares_its_tables_and_a_trie():
    target = Tabular([Token(0, b"a"), Token(1, b"a"), Token(2, b"b")], {})
    items = Tabular(list(b"ab"), {tuple(b"a"): 1.0})
    trie = Coerced.build_trie(target.vocab, b"".join)
    c1 = items.coerce(target, f=b"".join, trie=trie)
    c2 = items.spawn().coerce(target, f=b"".join, trie=trie)
    assert c1.tables is target.tables and c2.trie is c1.trie
    with pytest.raises(ValueError, match="different vocabulary"):
        items.coerce([b"a"], f=b"".join, trie=trie)


async def test_duplicate_byte_tokens_each_get_the_weight_of_their_bytes():
    target_vocab = [Token(0, b"a"), Token(1, b"a"), Token(2, b"ab")]
    items = Tabular(list(b"ab"), {tuple(b"a"): 1.0, tuple(b"ab"): 3.0})
    c = items.coerce(target_vocab, f=b"".join)
    w = await c.logw_next([])
    assert w[Token(0, b"a")] == w[Token(1, b"a")] == pytest.approx(0.0)
    assert w[Token(2, b"ab")] == pytest.approx(math.log(3 / 4))


# Potentials with only prefix/complete -------------------------------------------


class PrefixOnly(Potential):
    """Over the bytes of "abc": `prefix = -0.5·len - #b`, -inf once "cc" appears;
    `complete = prefix - 1` after an "a", else -inf. No vectorised logw_next."""

    def __init__(self):
        super().__init__(list(b"abc"))
        self.prefix_calls = self.complete_calls = 0
        self.on_call = None

    async def prefix(self, context):
        self.prefix_calls += 1
        if self.on_call is not None:
            self.on_call(self.prefix_calls)
        if any(x == y == ord("c") for x, y in zip(context, context[1:])):
            return -math.inf
        return -0.5 * len(context) - sum(x == ord("b") for x in context)

    async def complete(self, context):
        self.complete_calls += 1
        logw = await self.prefix(context)
        return logw - 1.0 if context and context[-1] == ord("a") else -math.inf


class BatchedPrefixOnly(PrefixOnly):
    """The same values; `batch_prefix` overridden (counted), `logw_next` still not."""

    batch_calls = 0

    async def batch_prefix(self, contexts):
        self.batch_calls += 1
        return np.array([await self.prefix(c) for c in contexts])


WALK_TOKENS = [b"a", b"ab", b"abc", b"b", b"ba", b"bb", b"c", b"cc", b"cca", b""]


def _definition(p, ctx, tokens):
    async def value():
        base = list(b"".join(ctx))
        logp = await p.prefix(base)
        row = [await p.prefix(base + list(t)) - logp for t in tokens]
        return np.array(row + [await p.complete(base) - logp])

    return value()


@pytest.mark.parametrize("kind", [PrefixOnly, BatchedPrefixOnly])
@pytest.mark.filterwarnings("ignore:.*no vectorised logw_next")
async def test_the_prefix_walk_equals_the_definition_with_fewer_calls(kind):
    p = kind()
    walk = p.coerce(WALK_TOKENS, f=b"".join)
    for ctx in [[], [b"a"], [b"ab", b"c"], [b"c"], [b"b", b"ba"]]:
        want = await _definition(kind(), ctx, WALK_TOKENS)
        p.prefix_calls = p.complete_calls = 0
        got = (await walk.logw_next(ctx)).weights
        np.testing.assert_array_equal(got, want)
        # one complete per node whose row is read, |V| prefix calls per such node and
        # one at the root (the base class asks prefix(node) again at every node);
        # PrefixOnly.complete calls prefix once itself
        assert p.prefix_calls == 1 + 3 * p.complete_calls + p.complete_calls
        assert p.complete_calls >= 1
    if kind is BatchedPrefixOnly:
        assert p.batch_calls > 0


async def test_a_coerced_prefix_walk_is_cancelled_within_one_pacing_interval():
    big = _ByteChecker()
    walk = big.coerce([bytes([a, b]) for a in range(256) for b in range(16)], f=b"".join)
    task = asyncio.ensure_future(walk.logw_next([]))
    big.cancel_at(5000, task)
    with pytest.warns(UserWarning, match="no vectorised logw_next"):
        with pytest.raises(asyncio.CancelledError):
            await task
    # the walk yields to the event loop at least every 256 prefix calls
    assert 0 <= big.calls - 5000 <= 256


class _ByteChecker(Potential):
    """Every byte sequence without a NUL byte; counts prefix calls, and cancels
    `task` at call number `at`."""

    def __init__(self):
        super().__init__(list(range(256)))
        self.calls, self.at, self.task = 0, None, None

    def cancel_at(self, at, task):
        self.at, self.task = at, task

    async def prefix(self, context):
        self.calls += 1
        if self.calls == self.at:
            self.task.cancel()
        return -math.inf if 0 in context else 0.0

    async def complete(self, context):
        return await self.prefix(context)


async def test_a_class_without_vectorised_logw_next_warns_once():
    class Once(PrefixOnly):
        pass

    a, b = Once().coerce(WALK_TOKENS, f=b"".join), Once().coerce(WALK_TOKENS, f=b"".join)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await a.logw_next([])
        await a.logw_next([b"a"])
        await b.batch_logw_next([[], [b"b"]])
    assert [str(w.message) for w in caught if "vectorised" in str(w.message)] == [
        str(caught[0].message)
    ]
    assert "AWRS" in str(caught[0].message) and "docs/potentials.md" in str(caught[0].message)
    assert caught[0].category is UserWarning


async def test_a_vectorised_potential_does_not_warn():
    items = byte_tabular(np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await items.coerce(TOKENS, f=b"".join).logw_next([])


async def test_awrs_never_walks_a_prefix_only_condition_and_its_eos_weight_is_the_products():
    class Unwalked(PrefixOnly):
        """PrefixOnly's support as a Boolean condition (AWRS refuses weighted ones)."""

        async def prefix(self, context):
            return 0.0 if await super().prefix(context) > -math.inf else -math.inf

        async def complete(self, context):
            return 0.0 if await super().complete(context) > -math.inf else -math.inf

    lm = random_tabular(WALK_TOKENS[:6], np.random.default_rng(3), max_len=3, p_zero=0.0)
    condition = Unwalked().coerce(WALK_TOKENS[:6], f=b"".join)
    product = lm * Unwalked().coerce(WALK_TOKENS[:6], f=b"".join)
    sampler = AWRS(lm, condition, seed=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Unwalked has no")  # the product's walk
        for ctx in [[], [b"a"], [b"ab", b"ba"], [b"abc"]]:
            want = (await product.logw_next(ctx))[EOS]
            assert await sampler.logw_eos(ctx) == pytest.approx(want, abs=1e-12)
        _WARNED.discard(Unwalked)
        warnings.filterwarnings("error", message=".*Unwalked has no")
        seqs = await sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=3, seed=1)
    assert len(seqs.contexts) == 4


def test_is_join_tells_the_joins_of_the_given_separators():
    from genlm.control.potential.coerce import is_join

    assert is_join(b"".join) and is_join("".join)
    assert is_join(b"".join, (b"",)) and not is_join("".join, (b"",))
    assert not is_join(b",".join) and not is_join(lambda xs: b"".join(xs))
    assert not is_join(" ".join, ("",))
