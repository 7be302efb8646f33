import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.core import Tabular, random_tabular

from genlm.control import EOS, Potential
from genlm.control.potential import Normalized, Product, Tempered
from genlm.control.testing import check_potential

CONTEXTS = [[], ["a"], ["b"], ["a", "b"], ["c", "a", "b"]]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
async def test_product_adds_log_weights(seed):
    rng = np.random.default_rng(seed)
    p1, p2 = random_tabular(["a", "b", "c"], rng), random_tabular(["a", "b", "c"], rng)
    prod = p1 * p2
    assert isinstance(prod, Product)
    for c in CONTEXTS:
        assert await prod.prefix(c) == pytest.approx(await p1.prefix(c) + await p2.prefix(c))
        assert await prod.complete(c) == pytest.approx(
            await p1.complete(c) + await p2.complete(c)
        )
    await check_potential(prod, CONTEXTS)


async def test_product_over_partly_shared_vocabulary_keeps_the_intersection():
    p1 = Tabular(["a", "b", "c"], {("a",): 1.0, ("b",): 2.0})
    p2 = Tabular(["c", "b", "d"], {("b",): 3.0, ("c",): 1.0})
    with pytest.warns(UserWarning, match="keeps the 2 tokens"):
        prod = p1 * p2
    assert prod.vocab == ["b", "c"]
    w = await prod.logw_next([])
    assert w["b"] == pytest.approx(math.log(2 / 3) + math.log(3 / 4))
    assert w["a"] == float("-inf")
    await check_potential(prod, [[], ["b"], ["c"]])


def test_product_of_same_vocabulary_shares_tables():
    p1 = Tabular(["a", "b"], {("a",): 1.0})
    p2 = p1.spawn()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (p1 * p2).tables is p1.tables


def test_product_rejects_disjoint_vocabularies():
    with pytest.raises(ValueError, match="share no token"):
        Tabular(["a"], {("a",): 1.0}) * Tabular(["b"], {("b",): 1.0})


def test_product_rejects_different_token_types():
    with pytest.raises(TypeError, match="different token types"):
        Tabular([b"a"], {(b"a",): 1.0}) * Tabular([97], {(97,): 1.0})


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.1, 3.0))
async def test_tempered_scales_log_weights(seed, a):
    p = random_tabular(["a", "b", "c"], np.random.default_rng(seed))
    t = p**a
    assert isinstance(t, Tempered)
    for c in CONTEXTS:
        want = await p.prefix(c)
        got = await t.prefix(c)
        assert got == pytest.approx(a * want) if want > -np.inf else got == -np.inf
    await check_potential(t, CONTEXTS)


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_tempered_rejects_bad_exponents(bad):
    with pytest.raises(ValueError, match="exponent"):
        Tabular(["a"], {("a",): 1.0}) ** bad


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1))
async def test_normalized_is_a_distribution_over_finished_sequences(seed):
    vocab = ["a", "b"]
    p = random_tabular(vocab, np.random.default_rng(seed), max_len=3)
    n = p.normalize()
    assert isinstance(n, Normalized)
    for c in [[], ["a"]]:
        if await p.prefix(c) > -np.inf:
            assert (await n.logw_next(c)).sum() == pytest.approx(0.0)
    # Σ over every sequence of length ≤ 3 of exp(complete) is exp(p.prefix([])): the
    # rows are normalized and the start weight is p's (0.4.1's definition).
    seqs, frontier = [], [[]]
    for _ in range(4):
        seqs.extend(frontier)
        frontier = [s + [x] for s in frontier for x in vocab]
    total = sum([math.exp(await n.complete(s)) for s in seqs])
    assert total == pytest.approx(math.exp(await p.prefix([])))
    live = [c for c in CONTEXTS if "c" not in c]
    await check_potential(n, live)


def test_algebra_results_are_potentials():
    p = Tabular(["a"], {("a",): 1.0})
    for q in (p * p, p**2, p.normalize(), p.to_autobatched()):
        assert isinstance(q, Potential)
        assert q.eos == EOS
        assert q.tables is p.tables
