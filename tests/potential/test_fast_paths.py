"""Declared fast paths (`genlm.control.potential.fast_paths`): each built-in potential
declares exactly the paths it has, wrappers forward their inner potential's (with the
same values), and a user potential offers `allowed_next` by defining it."""

import asyncio
import math

import numpy as np
import pytest
from toys.core import random_tabular

from genlm.control import WFSA, BoolCFG, BoolFSA, JsonSchema, Potential
from genlm.control.constraints.cfg._cfg_budget import CoercedCFG
from genlm.control.constraints.fsa._fsa_coerce import CoercedDFA
from genlm.control.constraints.json_schema._json_coerce import CoercedJson
from genlm.control.potential import fast_paths
from genlm.control.potential.coerce import Coerced
from genlm.control.potential.product import Product
from genlm.control.weights import NEG_INF

VOCAB = [b"a", b"b", b"ab", b"ba", b"c"]


class SetChecked(Potential):
    """A condition over `VOCAB`: no `b` right after an `a`, with a user-defined
    `allowed_next` (no declaration besides the method)."""

    def __init__(self):
        super().__init__(VOCAB)
        self.asked = 0

    @staticmethod
    def _ok(ctx) -> bool:
        text = b"".join(ctx)
        return b"ab" not in text

    async def prefix(self, context):
        return 0.0 if self._ok(context) else NEG_INF

    async def complete(self, context):
        return await self.prefix(context)

    async def allowed_next(self, context, indices):
        self.asked += 1
        vocab_eos = self.vocab_eos
        return [self._ok(list(context) + ([] if i == len(self.vocab) else [vocab_eos[i]])) for i in indices]


def _regex() -> BoolFSA:
    return BoolFSA.from_regex(r"(ab|c)+")


CASES = {
    # Tabular overrides batch_logw_next (to count calls): by the rule, its rows are vectorised
    "tabular": (lambda: random_tabular(VOCAB, np.random.default_rng(0)), set(), True),
    "boolfsa": (_regex, {"stateful"}, True),
    "wfsa-from-regex": (lambda: WFSA.from_regex(r"a+b"), {"stateful"}, True),
    "boolcfg": (lambda: BoolCFG.from_lark('start: "a" start | "b"'), {"stateful"}, True),
    "json": (lambda: JsonSchema({"type": "integer"}), {"stateful"}, True),
    "coerced-dfa": (
        lambda: _regex().coerce(VOCAB, b"".join),
        {"cheap_logw_next", "allowed_next", "batch_allowed", "token_trie", "tokens_to_finish", "most_tokens_to_finish"},
        True,
    ),
    # a weighted automaton's rows are not Boolean: no bool mask of them is offered
    "coerced-weighted-dfa": (
        lambda: WFSA.from_regex(r"a+b").coerce(VOCAB, b"".join),
        {"cheap_logw_next", "allowed_next", "token_trie", "tokens_to_finish", "most_tokens_to_finish"},
        True,
    ),
    # a grammar and a schema bound the tokens left by the fewest bytes to a document
    "coerced-json": (
        lambda: JsonSchema({"type": "integer"}).coerce([b"1", b"2", b"12"], b"".join),
        {"batch_allowed", "token_trie", "tokens_to_finish", "most_tokens_to_finish"},
        True,
    ),
    "coerced-generic": (lambda: BoolCFG.from_lark('start: "a" start | "b"').coerce(VOCAB, b"".join), {"token_trie", "tokens_to_finish"}, True),
    # a product ends only where both factors do: it takes the larger of their bounds
    "product": (
        lambda: Product(_regex().coerce(VOCAB, b"".join), SetChecked()),
        {"tokens_to_finish", "most_tokens_to_finish"},
        True,
    ),
    "tempered": (lambda: _regex() ** 2.0, set(), True),
    "user-allowed-next": (SetChecked, {"allowed_next"}, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_potential_declares_exactly_its_fast_paths(name):
    make, paths, vectorised = CASES[name]
    p = make()
    assert fast_paths.declared(p) == frozenset(paths)
    assert fast_paths.vectorised_logw_next(p) is vectorised


CONTEXTS = [[], [b"a"], [b"ab"], [b"c", b"ab"], [b"ab", b"c", b"c"], [b"c", b"ab", b"ab"]]


@pytest.mark.parametrize("name", ["coerced-dfa", "coerced-json"])
async def test_batch_allowed_is_where_the_rows_are_finite(name):
    """`BatchAllowed`: the kept per-state bool rows equal `rows > -inf`, on every
    context with weight, asked twice (the second time from the kept masks)."""
    p = CASES[name][0]()
    contexts = [c for c in (CONTEXTS if name == "coerced-dfa" else [[], [b"1"], [b"1", b"2"], [b"12"]]) if await p.prefix(c) > NEG_INF]
    assert len(contexts) >= 3
    rows = np.stack([w.weights for w in await p.batch_logw_next(contexts)])
    for _ in range(2):
        mask = await p.batch_allowed(contexts)
        assert mask.dtype == bool
        np.testing.assert_array_equal(mask, rows > NEG_INF)
    with pytest.raises(ValueError, match="weight zero"):
        await p.batch_allowed([[b"b"]] if name == "coerced-dfa" else [[b"1", b"1", b"x"]])


async def test_most_tokens_to_finish_is_the_largest_finite_bound():
    """`MostTokensToFinish`: the largest finite entry of each context's bound row,
    whose `inf` entries are exactly the row's `-inf` ones."""
    p = CASES["coerced-dfa"][0]()
    contexts = [c for c in CONTEXTS if await p.prefix(c) > NEG_INF]
    bounds = await p.batch_tokens_to_finish(contexts)
    rows = np.stack([w.weights for w in await p.batch_logw_next(contexts)])
    np.testing.assert_array_equal(bounds < np.inf, rows > NEG_INF)
    most = await p.batch_most_tokens_to_finish(contexts)
    np.testing.assert_array_equal(most, [r[r < np.inf].max() for r in bounds])
    assert most.max() >= 1  # some token still needs tokens after it


def test_the_classes_the_cases_build():
    assert type(CASES["coerced-dfa"][0]()) is CoercedDFA
    assert type(CASES["coerced-json"][0]()) is CoercedJson
    assert type(CASES["coerced-generic"][0]()) is CoercedCFG
    assert isinstance(CASES["coerced-generic"][0](), Coerced)


@pytest.mark.parametrize("name", list(CASES))
def test_the_autobatched_view_forwards_its_inner_declarations(name):
    p = CASES[name][0]()
    view = p.to_autobatched()
    assert fast_paths.declared(view) == fast_paths.declared(p)
    assert fast_paths.vectorised_logw_next(view) is fast_paths.vectorised_logw_next(p)
    assert view.rows_class() is type(p)


async def test_the_view_forwards_states_with_the_inner_values():
    fsa = _regex()
    view = fsa.to_autobatched()
    assert fast_paths.carrier(view) is view
    state = view.state_of([ord("a")])
    for byte in b"abc":
        want = fsa.logw_next_of(fsa.advance(fsa.state_of([ord("a")]), byte)) if byte == ord("b") else None
        got = view.advance(state, byte)
        if want is None:
            assert got is None
        else:
            assert view.logw_next_of(got).tolist() == want.tolist()
    assert fast_paths.carrier(random_tabular(VOCAB, np.random.default_rng(1)).to_autobatched()) is None


async def test_the_view_forwards_set_checks_with_the_inner_values():
    coerced = _regex().coerce(VOCAB, b"".join)
    view = coerced.to_autobatched()
    every = list(range(len(coerced.vocab_eos)))
    for ctx in ([], [b"ab"], [b"a"]):
        got = np.asarray(await fast_paths.allowed_next(view)(ctx, every), dtype=bool)
        want = np.asarray(await coerced.allowed_next(ctx, every), dtype=bool)
        assert got.tolist() == want.tolist()
        row = (await coerced.logw_next(ctx)).weights if ctx != [b"a"] else None
        if row is not None:
            assert got.tolist() == (row > NEG_INF).tolist()


async def test_a_user_allowed_next_is_found_and_used_by_awrs():
    from genlm.control import AWRS

    cond = SetChecked()
    assert fast_paths.allowed_next(cond) is not None
    assert fast_paths.allowed_next(cond.to_autobatched()) is not None
    lm = random_tabular(VOCAB, np.random.default_rng(2), max_len=4, p_zero=0.0)
    sampler = AWRS(lm, cond)
    sampler.enumerate_at = 0  # force the search, which checks draws in blocks
    for seed in range(5):
        sampler.rng = np.random.default_rng(seed)
        token, logw, _ = await sampler.sample([b"a"])
        assert token in (b"a", b"c", lm.eos) or logw == NEG_INF
    assert cond.asked > 0


def test_an_allowed_next_that_is_not_callable_is_a_type_error():
    class Broken(SetChecked):
        allowed_next = True

    with pytest.raises(TypeError, match="Broken.allowed_next must be an async method or None"):
        fast_paths.allowed_next(Broken())


def test_product_declares_only_the_bound_of_its_factors():
    """A product combines no rows, masks or set checks of its factors; it ends only
    where both do, so it takes the larger of their tokens-to-finish bounds (and of
    their largest bounds, where each factor with a bound offers one)."""
    c = _regex().coerce(VOCAB, b"".join)
    assert fast_paths.declared(Product(c, c)) == frozenset({"tokens_to_finish", "most_tokens_to_finish"})
    assert not Product(c, c).cheap_logw_next and c.cheap_logw_next
    g = BoolCFG.from_lark('start: "a" start | "b"').coerce(VOCAB, b"".join)  # a bound, but no largest bound
    assert fast_paths.declared(Product(c, g)) == frozenset({"tokens_to_finish"})
    j = JsonSchema({"type": "integer"}).coerce(VOCAB, b"".join)  # a bound and its largest
    assert fast_paths.declared(Product(c, j)) == frozenset({"tokens_to_finish", "most_tokens_to_finish"})


def test_the_declared_paths_of_sparse_potentials():
    class Sparse(SetChecked):
        async def sparse_logw_next(self, context):
            return None

    p = Sparse()
    assert "sparse_logw_next" in fast_paths.declared(p)
    assert "sparse_logw_next" in fast_paths.declared(p.to_autobatched())
    assert fast_paths.vectorised_logw_next(p)
    assert math.isinf(asyncio.run(p.prefix([b"a", b"b"])))


async def test_a_coerced_walk_over_a_view_of_an_unvectorised_potential():
    """The view forwards `rows_class()`: the walk takes the per-prefix path, warns once
    naming the inner class, and gives the plain coercion's row."""

    class OnlyPrefix(Potential):
        def __init__(self):
            super().__init__(list(b"abc"))

        async def prefix(self, context):
            return NEG_INF if bytes(context).count(b"b") > 1 else -0.5 * len(context)

        async def complete(self, context):
            return await self.prefix(context) - 1.0

    p = OnlyPrefix()
    assert not fast_paths.vectorised_logw_next(p.to_autobatched())
    vocab = [b"a", b"b", b"ab", b"bb", b"cab"]
    with pytest.warns(UserWarning, match="^OnlyPrefix has no vectorised logw_next"):
        walk = await Coerced(p.to_autobatched(), vocab, b"".join).logw_next([b"a"])
    plain = await Coerced(p, vocab, b"".join, homomorphic=False).logw_next([b"a"])
    assert walk.weights.tolist() == pytest.approx(plain.weights.tolist())
    assert walk.weights[vocab.index(b"bb")] == NEG_INF
