import asyncio
import math

import numpy as np
import pytest
from core_toys import Tabular, random_tabular
from genlm.backend.tokenization import Token
from hypothesis import given, settings
from hypothesis import strategies as st

from genlm.control import EOS, Potential
from genlm.control.potential.base import SparseLogws
from genlm.control.testing import check_potential
from genlm.control.weights import LazyWeights


class Const(Potential):
    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return 0.0


def test_empty_vocabulary_is_rejected():
    with pytest.raises(ValueError, match="vocabulary is empty"):
        Const([])


def test_duplicate_tokens_are_rejected():
    with pytest.raises(ValueError, match="duplicate tokens"):
        Const([b"a", b"b", b"a"])


def test_mixed_token_types_are_rejected():
    with pytest.raises(TypeError, match="mixes token types"):
        Const([b"a", "b"])


def test_eos_in_vocabulary_is_rejected():
    with pytest.raises(TypeError, match="end marker"):
        Const([b"a", EOS])


def test_tokens_with_the_same_bytes_but_different_ids_are_distinct():
    p = Const([Token(0, b"a"), Token(1, b"a"), Token(2, b"b")])
    assert len(p.vocab_eos) == 4
    assert p.lookup[Token(1, b"a")] == 1
    w = p.make_lazy_weights(np.array([-1.0, -2.0, -3.0, -4.0]))
    assert w[Token(1, b"a")] == -2.0
    # Plain bytes reach the first id with those bytes.
    assert w[b"a"] == -1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
async def test_default_logw_next_is_the_prefix_difference(seed):
    p = random_tabular(["a", "b", "c"], np.random.default_rng(seed))
    contexts = [[], ["a"], ["b", "c"], ["a", "a", "b"]]
    await check_potential(p, contexts)


async def test_logw_next_exact_values():
    p = Tabular(["a", "b"], {("a",): 0.2, ("a", "b"): 0.3, ("b",): 0.4, (): 0.1})
    w = await p.logw_next([])
    assert w["a"] == pytest.approx(math.log(0.5))
    assert w["b"] == pytest.approx(math.log(0.4))
    assert w[EOS] == pytest.approx(math.log(0.1))
    assert w.sum() == pytest.approx(0.0)
    w = await p.logw_next(["a"])
    assert w["b"] == pytest.approx(math.log(0.3 / 0.5))
    assert w["a"] == float("-inf")


async def test_logw_next_of_zero_weight_context_is_an_error():
    p = Tabular(["a", "b"], {("a",): 1.0})
    with pytest.raises(ValueError, match="weight zero"):
        await p.logw_next(["b"])


async def test_score_dispatches_on_eos():
    p = Tabular(["a", "b"], {("a",): 0.25, ("a", "b"): 0.75})
    assert await p.score(["a"]) == pytest.approx(0.0)
    assert await p.score(["a", EOS]) == pytest.approx(math.log(0.25))
    np.testing.assert_allclose(
        await p.batch_score([["a"], ["a", EOS]]), [0.0, math.log(0.25)]
    )


async def test_sparse_logw_next_is_scattered_into_one_block():
    class Sparse(Const):
        async def sparse_logw_next(self, context):
            return SparseLogws(np.array([len(context) % 3]), np.array([0.0]))

    p = Sparse(["a", "b", "c"])
    rows = await p.batch_logw_next([[], ["a"], ["a", "a"]])
    for i, row in enumerate(rows):
        want = np.full(4, -np.inf)
        want[i] = 0.0
        np.testing.assert_array_equal(row.weights, want)
    assert rows[0].weights.base is rows[1].weights.base


def test_lazy_weights_operations():
    w = LazyWeights(np.log([0.5, 0.25, 0.25]), {"a": 0, "b": 1, EOS: 2}, ["a", "b", EOS])
    assert w["zzz"] == float("-inf")
    assert w.sum() == pytest.approx(0.0)
    assert list(w.materialize(top=2)) == ["a", "b"]
    assert w.argmax() == "a"
    doubled = w * w
    assert doubled["a"] == pytest.approx(2 * math.log(0.5))
    np.testing.assert_allclose((w + w).exp().weights, [1.0, 0.5, 0.5])
    np.testing.assert_allclose(w.exp().normalize().weights, [0.5, 0.25, 0.25])
    with pytest.raises(ValueError, match="shape"):
        LazyWeights(np.zeros(2), {"a": 0}, ["a", "b", EOS])


async def test_batch_methods_run_concurrently():
    class Slow(Const):
        async def prefix(self, context):
            await asyncio.sleep(0.05)
            return 0.0

    p = Slow(["a"])
    results = await asyncio.wait_for(p.batch_prefix([[]] * 50), timeout=2.0)
    assert len(results) == 50


def test_byte_value_vocabularies_also_answer_to_one_byte_strings():
    p = Const(list(range(256)))
    w = p.make_lazy_weights(np.arange(257, dtype=float))
    assert w[b"a"] == w[97] == 97.0
    assert w[b"ab"] == float("-inf")
