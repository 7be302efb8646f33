import asyncio
import math

import numpy as np
import pytest
from genlm.backend.tokenization import Token
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.core import Tabular, random_tabular

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


# tables are read-only ------------------------------------------------------------


class AssignsTablesBefore(Const):
    def __init__(self):
        self.tables = Potential.build_tables([b"a"])  # the error is raised at this line
        super().__init__([b"a"])


class AssignsTablesAfter(Const):
    def __init__(self):
        super().__init__([b"a"])
        self.tables = Potential.build_tables([b"a"])  # the error is raised at this line


@pytest.mark.parametrize("cls", [AssignsTablesBefore, AssignsTablesAfter])
def test_assigning_tables_fails_at_that_line(cls):
    with pytest.raises(AttributeError, match=f"{cls.__name__}.tables is read-only") as info:
        cls()
    assert info.traceback[-2].frame.code.name == "__init__"  # the subclass's own line
    assert "self.tables = " in str(info.traceback[-2].statement)


def test_tables_are_shared_and_not_rebuilt():
    p = Const([b"a", b"b"])
    q = Const(tables=p.tables)
    assert q.tables is p.tables and q.vocab_eos == [b"a", b"b", EOS]
    with pytest.raises(TypeError, match="tables must be VocabTables"):
        Const(tables={"vocab": [b"a"]})


# what a user's potential returns is checked where it enters the framework -------


_DEFAULT = object()


class Returns(Potential):
    """`prefix`, `complete` and `batch_score` return `value`; `logw_next` returns `row`
    (the default derivation when `row` is not given)."""

    def __init__(self, value, row=_DEFAULT):
        super().__init__([b"a", b"b"])
        self.value, self.row = value, row

    async def prefix(self, context):
        return self.value

    async def complete(self, context):
        return self.value

    async def logw_next(self, context):
        return await super().logw_next(context) if self.row is _DEFAULT else self.row

    async def batch_score(self, contexts):
        return self.value


@pytest.mark.parametrize("method", ["prefix", "complete"])
@pytest.mark.parametrize(
    "value, said",
    [(None, r"returned None \(a missing `return`\?\)"), ("0.0", "returned a str"), ({}, "returned a dict")],
)
async def test_bad_scalar_return_is_a_type_error_naming_class_and_method(method, value, said):
    with pytest.raises(TypeError, match=rf"Returns\.{method} {said}; expected a float log weight"):
        await getattr(Returns(value), method)([b"a"])


@pytest.mark.parametrize("value", [0.0, -math.inf, np.float32(-1.5), np.float64(2.0), 3, math.nan])
async def test_numbers_of_every_kind_pass_unchanged(value):
    p = Returns(value)
    assert (await p.prefix([])) is value
    assert list(await p.batch_prefix([[], [b"a"]]))[0] == pytest.approx(value, nan_ok=True)


@pytest.mark.parametrize(
    "row, said",
    [
        (None, "returned None"),
        ({b"a": 0.0, b"b": 0.0}, r"returned a dict; .*make_lazy_weights"),
        (LazyWeights(np.zeros(2), {b"a": 0, EOS: 1}, [b"a", EOS]), "returned LazyWeights with 2 entries"),
    ],
)
async def test_bad_logw_next_return_is_a_type_error(row, said):
    p = Returns(0.0, row=row)
    with pytest.raises(TypeError, match=rf"Returns\.logw_next {said}"):
        await p.logw_next([])
    with pytest.raises(TypeError, match=rf"Returns\.logw_next {said}"):
        await p.batch_logw_next([[], [b"a"]])


@pytest.mark.parametrize(
    "value, said",
    [
        (None, "returned None"),
        ([0.0], "returned 1 values for 2 contexts"),
        ([0.0, None], r"batch_score \(one of its values\) returned None"),
        (np.array(["a", "b"]), "returned an array of dtype <U1"),
        ({0: 0.0, 1: 0.0}, "returned a dict"),
    ],
)
async def test_bad_batch_return_is_a_type_error(value, said):
    with pytest.raises(TypeError, match=rf"Returns\.{said}" if said.startswith("batch") else rf"Returns\.batch_score {said}"):
        await Returns(value).batch_score([[], [b"a"]])


async def test_a_forgotten_await_is_reported_and_its_coroutine_closed():
    inner = Returns(0.0)

    class Forgot(Returns):
        async def prefix(self, context):
            return inner.prefix(context)  # missing await

    with pytest.raises(TypeError, match=r"Forgot\.prefix returned an awaitable coroutine \(a missing `await`\?\)"):
        await Forgot(0.0).prefix([])


async def test_a_synchronous_method_is_reported():
    class Sync(Returns):
        def complete(self, context):
            return 0.0

    with pytest.raises(TypeError, match=r"Sync\.complete must be a coroutine function"):
        await Sync(0.0).complete([])


def test_built_in_potentials_are_not_wrapped():
    from genlm.control.potential.product import Product
    from genlm.control.potential.reweight import Tempered

    assert not hasattr(Product.prefix, "__genlm_checked__")
    assert not hasattr(Tempered.logw_next, "__genlm_checked__")
    assert Returns.prefix.__genlm_checked__ and Returns.prefix.__name__ == "prefix"
