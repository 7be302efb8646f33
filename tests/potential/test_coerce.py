import math

import numpy as np
import pytest
from core_toys import Tabular, random_tabular
from genlm.backend.tokenization import Token
from hypothesis import given, settings
from hypothesis import strategies as st

from genlm.control import EOS
from genlm.control.potential import Coerced
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
