"""0.4.1 code that uses potentials directly runs unchanged: the error types and
wordings it may catch or match, `Product`'s index maps, the contract checks'
messages, and an autobatched view that answers like the potential it wraps (see
docs/compat-041.md)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from genlm.control import EOS, BoolFSA, Potential
from genlm.control.potential import WFSA, AutoBatchedPotential, Product
from genlm.control.potential.autobatch import autobatched
from genlm.control.typing import Atomic

NEG_INF = float("-inf")


class Lengths(Potential):
    """`prefix(xs) = -len(xs)`, `complete(xs) = -len(xs) - 1`: every row is
    `[-1, ..., -1, -1]` (a consistent potential)."""

    async def prefix(self, context):
        return -float(len(context))

    async def complete(self, context):
        return -float(len(context)) - 1.0


class Dead(Lengths):
    async def prefix(self, context):
        return NEG_INF


# Construction and evaluation errors: 0.4.1's types, and its wording first --------


@pytest.mark.parametrize(
    "make, error, ours, theirs",
    [
        (lambda: Lengths([]), ValueError, "vocabulary is empty", "vocabulary cannot be empty"),
        (
            lambda: Lengths([b"a"], token_type="bytes"),
            ValueError,
            "got 'bytes'",
            "token_type must be a TokenType",
        ),
        (
            lambda: Lengths([b"a"], token_type=Atomic(str)),
            TypeError,
            "not of the declared type",
            "Tokens in vocabulary must be of type",
        ),
        (
            lambda: Lengths([b"a"], eos="</s>"),
            ValueError,
            "got '</s>'",
            "EOS must be an instance of EndOfSequence",
        ),
        (
            lambda: Lengths([b"a", b"a"]),
            ValueError,
            "duplicate tokens",
            "Duplicate token.*found in vocabulary",
        ),
    ],
    ids=["empty", "token-type", "wrong-type", "eos", "duplicate"],
)
def test_construction_errors_match_both_wordings(make, error, ours, theirs):
    with pytest.raises(error, match=ours) as caught:
        make()
    assert caught.match(theirs)


async def test_a_context_of_weight_zero_names_prefix():
    with pytest.raises(ValueError, match="Context.*has weight zero under `prefix`") as caught:
        await Dead([b"a", b"b"]).logw_next([b"a"])
    assert caught.match(r"Dead\(")  # and which potential


@pytest.mark.parametrize("cls", [WFSA, BoolFSA])
async def test_an_automaton_context_of_weight_zero(cls):
    fsa = cls.from_regex(r"a")
    with pytest.raises(ValueError, match="Context.*has zero weight") as caught:
        await fsa.logw_next(b"b")
    assert caught.match("weight zero")
    assert (await fsa.logw_next(b"")).weights[fsa.lookup[ord("a")]] == 0.0


def test_a_missing_spawn_names_the_class_and_the_rule():
    with pytest.raises(NotImplementedError, match=r"Potential\.spawn\(\) must be implemented by subclasses\.") as caught:
        Lengths([b"a"]).spawn()
    assert caught.match("Lengths does not implement spawn")


# The contract checks: 0.4.1's names for the check that failed --------------------


class WrongRow(Lengths):
    """`logw_next` disagrees with `prefix` on token b"b"."""

    async def logw_next(self, context):
        row = np.full(len(self.vocab_eos), -1.0)
        row[self.lookup[b"b"]] = 5.0
        return self.make_lazy_weights(row)

    async def batch_logw_next(self, contexts):
        return [await self.logw_next(c) for c in contexts]


class WrongBatchScore(Lengths):
    async def batch_score(self, contexts):
        return np.zeros(len(contexts))


async def test_check_messages_open_with_0_4_1s_names():
    with pytest.raises(AssertionError, match="^logw_next consistency not satisfied: .*token b'b'"):
        await WrongRow([b"a", b"b"]).assert_logw_next_consistency([])
    with pytest.raises(AssertionError, match="^Factorization not satisfied: "):
        await WrongRow([b"a", b"b"]).assert_autoreg_fact([b"b"])
    with pytest.raises(AssertionError, match="^Batch score mismatch: .*got 0.0, expected -1.0"):
        await WrongBatchScore([b"a", b"b"]).assert_batch_consistency([[b"a"]])
    await Lengths([b"a", b"b"]).assert_contract([[], [b"a", b"b"]])  # a good one passes


# Product's index maps -----------------------------------------------------------


def test_product_index_maps():
    same = Product(Lengths([b"a", b"b"]), Lengths([b"a", b"b"]))
    assert same.v1_idxs is ... and same.v2_idxs is ...
    p1, p2 = Lengths([b"a", b"b", b"c"]), Lengths([b"d", b"b", b"a"])
    with pytest.warns(RuntimeWarning):
        mixed = Product(p1, p2)
    assert mixed.vocab == [b"a", b"b"]
    assert mixed.v1_idxs == [0, 1, 3]  # b"a", b"b", EOS in p1.vocab_eos
    assert mixed.v2_idxs == [2, 1, 3]
    for k, token in enumerate(mixed.vocab_eos):
        assert p1.vocab_eos[mixed.v1_idxs[k]] == token == p2.vocab_eos[mixed.v2_idxs[k]]


# The autobatched view ------------------------------------------------------------


async def test_a_batch_method_replaced_after_the_view_serves_the_batches():
    inner = Lengths([b"a", b"b"])
    view = autobatched(inner)
    calls = []
    original = inner.batch_logw_next

    async def counting(contexts):
        calls.append(len(contexts))
        return await original(contexts)

    inner.batch_logw_next = counting
    contexts = [[], [b"a"], [b"a", b"b"]]
    rows = await asyncio.gather(*(view.logw_next(c) for c in contexts))
    assert calls == [3]
    for row, c in zip(rows, contexts):
        row.assert_equal(await inner.logw_next(c))


def test_the_view_defines_every_public_potential_method():
    shared_tables = {"build_tables", "make_lazy_weights", "alloc_logws"}
    missing = [
        name
        for name, member in vars(Potential).items()
        if callable(member)
        and not name.startswith("_")
        and name not in shared_tables
        and name not in vars(AutoBatchedPotential)
    ]
    assert not missing


async def test_the_view_answers_for_the_inner_potential():
    fsa = BoolFSA.from_regex(r"ab*")
    view = autobatched(fsa)
    assert view.engine_source() == fsa.engine_source()
    assert view.to_autobatched() is view
    target = [b"a", b"b", b"ab", b"ba"]
    via_view, direct = view.coerce(target, f=b"".join), fsa.coerce(target, f=b"".join)
    assert type(via_view) is type(direct) and via_view.vocab == direct.vocab
    for context in ([], [b"a"], [b"ab", b"b"]):
        (await via_view.logw_next(context)).assert_equal(await direct.logw_next(context))
    lengths = Lengths([b"a", b"b"])
    normalized = autobatched(lengths).normalize()
    row = (await normalized.logw_next([b"a"])).weights
    assert np.isclose(np.logaddexp.reduce(row), 0.0)
    assert np.allclose(row, (await lengths.normalize().logw_next([b"a"])).weights)
    await autobatched(lengths).assert_contract([[], [b"b"]])
    assert EOS in normalized.vocab_eos


class _Counted(Lengths):
    """`Lengths`, or zero everywhere when `dead`; counts its scalar calls."""

    def __init__(self, vocab, dead=False):
        super().__init__(vocab)
        self.dead, self.calls = dead, []

    async def prefix(self, context):
        self.calls.append(("prefix", tuple(context)))
        return NEG_INF if self.dead else await super().prefix(context)

    async def complete(self, context):
        self.calls.append(("complete", tuple(context)))
        return NEG_INF if self.dead else await super().complete(context)


async def test_product_does_not_ask_its_second_factor_after_a_zero():
    """0.4.1's laziness: `prefix`/`complete` skip `p2` when `p1` is `-inf`; the values
    are the sums, and with `p1` alive both factors are asked."""
    zero, other = _Counted([b"a", b"b"], dead=True), _Counted([b"a", b"b"])
    product = Product(zero, other)
    assert await product.prefix([b"a"]) == NEG_INF and await product.complete([]) == NEG_INF
    assert other.calls == [] and zero.calls == [("prefix", (b"a",)), ("complete", ())]
    alive, second = _Counted([b"a", b"b"]), _Counted([b"a", b"b"])
    both = Product(alive, second)
    assert await both.prefix([b"a", b"b"]) == -4.0 and await both.complete([b"a"]) == -4.0
    assert second.calls == alive.calls == [("prefix", (b"a", b"b")), ("complete", (b"a",))]
    # the batched forms ask both at once and give the same values
    assert list(await both.batch_prefix([[b"a"], []])) == [-2.0, 0.0]


def test_jupyter_displays_and_util_token():
    """0.4.1's notebook forms: automata and grammars display in Jupyter
    (`_repr_svg_` through Graphviz, `_repr_html_`), and `genlm.control.util.Token` is
    the backend's token class."""
    import graphviz
    from genlm.backend.tokenization.token import Token as BackendToken
    from genlm.grammar import CFG, Float

    from genlm.control.potential.built_in import WCFG
    from genlm.control.util import Token

    assert Token is BackendToken
    html = WCFG(CFG(Float, S="S", V={b"a"[0]}))._repr_html_()
    assert isinstance(html, str) and "<" in html
    try:
        svg = BoolFSA.from_regex("a(b|c)")._repr_svg_()
    except graphviz.backend.execute.ExecutableNotFound:
        return  # no `dot` program here: the call reached Graphviz
    assert "<svg" in svg
