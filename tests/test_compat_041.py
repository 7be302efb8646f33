"""Code written against genlm-control 0.4.1's public API runs unchanged: one test (or a
few) per form that 0.4.1's own suite found broken (see docs/compat-041.md)."""

from __future__ import annotations

import asyncio
import math
import warnings

import numpy as np
import pytest
from toys.ab import AB, CountCritic, ab_lm
from toys.core import Tabular

from genlm.control import EOS, SMC, BoolFSA, Potential, direct_token_sampler
from genlm.control.potential import WFSA, Coerced
from genlm.control.potential.autobatch import autobatched
from genlm.control.potential.built_in import WCFG
from genlm.control.sampler import CFGBoundary, MultiTokenUnitSampler, TokenSetBoundary
from genlm.control.sampler.smc import SequenceModel, smc_standard
from genlm.control.sampler.token import DirectTokenSampler

NEG_INF = float("-inf")


class AsyncCleanup(Potential):
    """A 0.4.1-style potential: `async def cleanup`."""

    def __init__(self):
        super().__init__(AB)
        self.cleaned = 0

    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return 0.0

    async def cleanup(self):
        await asyncio.sleep(0)
        self.cleaned += 1


# cleanup() --------------------------------------------------------------------


async def test_cleanup_can_be_awaited_or_not():
    lm = ab_lm()
    sampler = direct_token_sampler(lm)
    assert not sampler.cleanup()  # a plain call is done at once
    await sampler.cleanup()
    await lm.to_autobatched().cleanup()
    await SMC(sampler, critic=CountCritic()).cleanup()


async def test_an_inner_async_cleanup_runs_awaited_or_not():
    inner = AsyncCleanup()
    await (inner * ab_lm()).cleanup()
    assert inner.cleaned == 1
    pending = direct_token_sampler(inner * ab_lm()).cleanup()  # not awaited: still runs
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert inner.cleaned == 2
    await pending  # awaiting later is harmless


def test_an_inner_async_cleanup_runs_outside_an_event_loop():
    inner = AsyncCleanup()
    inner.to_autobatched().cleanup()
    assert inner.cleaned == 1


# assert_contract and verbosity= ------------------------------------------------


async def test_assert_contract_checks_and_prints(capsys):
    lm = ab_lm()
    await lm.assert_contract([[], [b"a"], [b"a", b"b"]], verbosity=1)
    out = capsys.readouterr().out
    assert "logw_next" in out and "factorization" in out and "batch" in out
    await lm.assert_contract([[b"b"]], batch_contexts=[])
    assert capsys.readouterr().out == ""


async def test_assert_contract_fails_on_a_broken_potential():
    class Broken(Tabular):
        async def logw_next(self, context):
            return self.make_lazy_weights(np.zeros(len(self.vocab_eos)))

    broken = Broken(AB, {(b"a",): 0.5, (b"b",): 0.5})
    with pytest.raises(AssertionError):
        await broken.assert_contract([[]])
    with pytest.raises(AssertionError):
        await broken.assert_logw_next_consistency([], 1e-3, 1e-5, None, 0)  # 0.4.1's order


# SequenceModel ---------------------------------------------------------------


class Scripted:
    """A duck-typed unit sampler (no `target`, no `batch_sample`)."""

    def __init__(self, step_logw=-0.3, eos_logw=-2.0, start=0.1):
        self.step_logw, self.eos_logw, self.start = step_logw, eos_logw, start

    async def start_weight(self):
        return self.start

    async def logw_eos(self, context):
        return self.eos_logw

    async def sample(self, context, draw=None):
        return 1, self.step_logw, 0.0


async def test_sequence_model_weight_api_with_a_duck_typed_sampler():
    model = SequenceModel(Scripted(), max_tokens=4, verbosity=0)
    await model.start()
    while not model.done:
        await model.step()
    assert model.context == [1, 1, 1, EOS]
    assert model.weight == pytest.approx(0.1 + 3 * -0.3 - 2.0)
    child = model.clone()
    child.weight = 5.0
    assert model.weight != 5.0 and child.context == model.context and child.context is not model.context


def test_sequence_model_weight_arithmetic():
    model = SequenceModel(unit_sampler=None)
    model.score(-2.0)
    model.twist(0.5)
    assert (model.weight, model.twist_amount) == (-1.5, 0.5)
    model.untwist()
    assert (model.weight, model.twist_amount) == (-2.0, 0.0)
    model.score(float("nan"))
    assert model.weight == NEG_INF
    with pytest.raises(ValueError, match=r"\+inf"):
        model.score(math.inf)


async def test_start_weight_of_zero_is_a_value_error():
    model = SequenceModel(Scripted(start=NEG_INF))
    with pytest.raises(ValueError, match="Start weight"):
        await model.start()


async def test_smc_standard_takes_0_4_1_arguments():
    pop = await smc_standard(SequenceModel(Scripted(), max_tokens=3), 4, 0.5, "systematic")
    assert len(pop) == 4 and all(p.done and p.context[-1] is EOS for p in pop)
    assert pop[0].context == [1, 1, EOS] and pop[0].weight == pytest.approx(0.1 - 2 * 0.3 - 2.0)


class CountingCritic(CountCritic):
    def __init__(self):
        super().__init__()
        self.scored = 0

    async def batch_score(self, contexts):
        self.scored += len(contexts)
        return await super().batch_score(contexts)

    async def score(self, context):
        self.scored += 1
        return await super().score(context)


@pytest.mark.parametrize("twist", [True, False])
async def test_twist_with_critic_gives_the_same_final_weights(twist):
    """Without resampling the twists telescope: the final weight is the same either way
    (sampler weight + critic.complete), and without twisting the critic scores only
    finished particles."""
    critic = CountingCritic()
    model = SequenceModel(direct_token_sampler(ab_lm()), critic, max_tokens=6, twist_with_critic=twist)
    pop = await smc_standard(model, 8, 0.0, seed=3)
    for p in pop:
        # the LM is normalized, so the direct sampler's increments are log Σ row = 0
        assert p.weight == pytest.approx(await critic.complete(p.context[:-1]))
    if not twist:
        assert critic.scored == 8


async def test_smc_without_resampling_scores_the_critic_once_per_particle():
    critic = CountingCritic()
    await SMC(direct_token_sampler(ab_lm()), critic=critic, autobatch=False)(10, 0.0, 8, seed=1)
    assert critic.scored == 10


# CFGBoundary(grammar_text, ...) and finalize_unit ----------------------------


def test_cfg_boundary_from_lark_text():
    b = CFGBoundary('start: expr\nexpr: NUMBER | expr "+" NUMBER\nNUMBER: /[0-9]+/', complete_rules={"start"}, min_length=1)
    assert b([], [b"5"]) is True and b([], [b"1", b"+", b"2"]) is True
    assert b([], [b"1", b"+"]) is False and b([], []) is False
    assert b([], [b"5", EOS]) is True
    assert b.get_parse_tree("1+2").data == "start" and b.get_parse_tree("+") is None
    short = CFGBoundary('start: "a"+', min_length=3)
    assert [short([], [b"a"] * n) for n in (1, 2, 3)] == [False, False, True]
    assert "complete_rules" in repr(b) and "complete_rules" not in repr(short)
    with pytest.raises(ValueError, match="Failed to create Lark parser"):
        CFGBoundary("start: undefined_rule")


async def test_lark_boundary_units_match_the_grammar():
    """Every unit drawn ends exactly where the text first parses (balanced parens)."""
    boundary = CFGBoundary('start: atom\natom: "(" atom ")" | "x"', min_length=1)
    lm = Tabular([b"(", b")", b"x"], {(b"(", b"x", b")"): 0.5, (b"x",): 0.5})
    sampler = MultiTokenUnitSampler(DirectTokenSampler(lm), boundary, max_subunits_per_unit=5)
    for seed in range(6):
        rng = np.random.default_rng(seed)
        unit, logw, _ = await sampler.sample([], draw=lambda opts, rng=rng: list(opts)[rng.integers(len(opts))])
        if logw > NEG_INF:
            assert b"".join(unit) in (b"x", b"(x)")


async def test_finalize_unit_shapes_the_unit():
    class DropSpace(TokenSetBoundary):
        def finalize_unit(self, subunits):
            return subunits[:-1]

    lm = Tabular(AB, {(b"a", b"b"): 1.0})
    sampler = MultiTokenUnitSampler(DirectTokenSampler(lm), DropSpace([b"b"]))
    unit, logw, _ = await sampler.sample([])
    assert unit == [b"a"] and logw == pytest.approx(0.0)
    assert TokenSetBoundary([b" "]).finalize_unit([b"x", b" "]) == [b"x", b" "]


# Error types ------------------------------------------------------------------


async def test_empty_batches_are_value_errors():
    lm = Tabular(AB, {(b"a",): 1.0})
    for method in (lm.batch_logw_next, lm.batch_score, lm.batch_prefix, lm.batch_complete):
        with pytest.raises(ValueError, match="non-empty"):
            await method([])


def test_error_types_are_both_0_4_1s_and_ours():
    with pytest.raises(ValueError):
        SMC(ab_lm())
    with pytest.raises(TypeError):
        SMC(ab_lm())
    with pytest.raises(ValueError, match="must be a Potential"):
        SMC(direct_token_sampler(ab_lm()), critic="not a potential")
    ints = Tabular([0, 1], {(0,): 1.0})
    for err in (ValueError, TypeError):
        with pytest.raises(err, match="must have the same token type"):
            ab_lm() * ints
    with pytest.raises(ValueError, match="common vocabulary"):
        ab_lm() * Tabular([b"z"], {(b"z",): 1.0})
    with pytest.warns(RuntimeWarning):
        ab_lm() * Tabular([b"a", b"c"], {(b"a",): 1.0})


async def test_an_error_in_a_subunit_sampler_reaches_the_caller():
    class Failing(DirectTokenSampler):
        async def sample(self, context, draw=None):
            if context:
                raise RuntimeError("subunit failure")
            return await super().sample(context, draw)

    lm = Tabular(AB, {(b"a", b"a"): 1.0})
    sampler = MultiTokenUnitSampler(Failing(lm), TokenSetBoundary([b"zz"]), max_subunits_per_unit=3)
    with pytest.raises(RuntimeError, match="subunit failure"):
        await sampler.sample([])


# Tempered, Normalized, is_terminal_only --------------------------------------


@pytest.mark.parametrize("beta", [0.0, -1.0, 2.0])
async def test_any_finite_power_keeps_zero_weights(beta):
    lm = Tabular(AB, {(b"a",): 0.25, (b"a", b"a"): 0.75})
    t = lm**beta
    assert t.p is lm and t.beta == beta
    for ctx in ([], [b"a"], [b"b"]):
        want = await lm.prefix(ctx)
        assert await t.prefix(ctx) == (NEG_INF if want == NEG_INF else pytest.approx(beta * want))
    row = await t.logw_next([b"a"])
    assert row[b"b"] == NEG_INF and not np.isnan(row.weights).any()
    await t.assert_contract([[], [b"a"]])


class _Started(Potential):
    """Over `a`/`b`: `prefix(xs) = 0.7 + Σ log(row)` with the unnormalized rows
    (a, b, EOS) = (1, 2, 1) when `len(xs) < 2`, else only EOS (weight 3)."""

    def row(self, xs):
        return np.log([1.0, 2.0, 1.0]) if len(xs) < 2 else np.array([NEG_INF, NEG_INF, math.log(3.0)])

    async def prefix(self, context):
        return 0.7 + sum(self.row(context[:i])[self.lookup[x]] for i, x in enumerate(context))

    async def complete(self, context):
        return await self.prefix(context) + self.row(context)[-1]

    async def logw_next(self, context):
        return self.make_lazy_weights(self.row(context))


async def test_normalized_keeps_the_start_weight():
    """0.4.1's start weight: `p.normalize()` has total mass `exp(p.prefix([]))` (an
    LM's `prefix([])` is 0), its rows sum to one, and over the finished sequences (enumerated) the
    masses are `exp(0.7)` times the product of the normalized rows."""
    p = _Started([b"a", b"b"])
    q = p.normalize()
    assert await q.prefix([]) == pytest.approx(0.7)
    seqs = [[]] + [[x] for x in (b"a", b"b")] + [[x, y] for x in (b"a", b"b") for y in (b"a", b"b")]
    total = sum([math.exp(await q.complete(xs)) for xs in seqs])
    assert total == pytest.approx(math.exp(0.7), rel=1e-12)
    assert await q.complete([b"b", b"a"]) == pytest.approx(0.7 + math.log(0.5) + math.log(0.25))
    await q.assert_contract([[], [b"a"], [b"a", b"b"]])
    assert await ab_lm().normalize().prefix([]) == 0.0


def test_is_terminal_only():
    class Terminal(CountCritic):
        def is_terminal_only(self):
            return True

    assert not ab_lm().is_terminal_only()
    assert (Terminal() ** 0.5).is_terminal_only() and Terminal().to_autobatched().is_terminal_only()


# WFSA / WCFG semirings and from_regex ----------------------------------------


def _float_ab():
    from genlm.grammar import WFSA as GrammarWFSA
    from genlm.grammar import Float

    m = GrammarWFSA(Float)
    m.add_I(0, 1.0)
    m.add_arc(0, b"a"[0], 1, 0.5)
    m.add_arc(0, b"b"[0], 1, 0.5)
    m.add_F(1, 1.0)
    return m


async def test_wfsa_semirings():
    from genlm.grammar import WFSA as GrammarWFSA
    from genlm.grammar import Boolean, Log
    from genlm.grammar.semiring import MaxPlus

    pot = WFSA(wfsa=_float_ab())
    assert pot.wfsa.R is Log
    assert await pot.complete(list(b"a")) == pytest.approx(math.log(0.5))
    with pytest.raises(ValueError, match="Unsupported semiring"):
        WFSA(wfsa=GrammarWFSA(MaxPlus))
    boolean = GrammarWFSA(Boolean)
    boolean.add_I(0, Boolean.one)
    boolean.add_F(0, Boolean.one)
    with pytest.raises(ValueError, match="Unsupported semiring"):
        WFSA(wfsa=boolean)
    assert BoolFSA(boolean).wfsa.R is Boolean


async def test_from_regex_arguments():
    from genlm.grammar import Boolean, Log

    assert WFSA.from_regex("a(b|c)", None, True).wfsa.R is Log
    assert BoolFSA.from_regex("a(b|c)").wfsa.R is Boolean
    with pytest.warns(DeprecationWarning, match="deprecated"):
        logfsa = BoolFSA.from_regex("a(b|c)", semiring="log")
    assert logfsa.wfsa.R is Log and await logfsa.complete(list(b"ab")) == 0.0
    with pytest.raises(ValueError, match="semiring must be"):
        BoolFSA.from_regex("a", semiring="float")
    with pytest.raises(ValueError, match="charset"):
        WFSA.from_regex("a.", charset=set("ab"))
    with pytest.raises(ValueError, match="to_bytes"):
        BoolFSA.from_regex("a", to_bytes=False)


def test_wcfg_rejects_a_boolean_grammar():
    from genlm.grammar import CFG, Boolean

    with pytest.raises(ValueError, match="Unsupported semiring"):
        WCFG(CFG(Boolean, S="S", V={b"a"[0]}))


# batch_logw_next as one batched LazyWeights ----------------------------------


async def test_batch_logw_next_is_a_list_and_a_batched_lazy_weights():
    lm = ab_lm()
    rows = await lm.batch_logw_next([[], [b"a"]])
    assert isinstance(rows, list) and len(rows) == 2
    assert rows.weights.shape == (2, len(lm.vocab_eos))
    singles = [await lm.logw_next(c) for c in ([], [b"a"])]
    for i, want in enumerate(singles):
        rows.spawn(rows.weights[i]).assert_equal(want)
        rows[i].assert_equal(want)
    rows.assert_equal(singles)
    np.testing.assert_allclose(rows.normalize().weights, rows.weights, atol=1e-12)
    assert np.shares_memory(rows[0].weights, rows.weights)


async def test_a_potential_returning_one_batched_lazy_weights_works():
    class Batched(Potential):
        async def prefix(self, context):
            return -float(len(context))

        async def complete(self, context):
            return -float(len(context)) - 1.0

        async def logw_next(self, context):
            return self.make_lazy_weights(np.array([-1.0, -1.0, -1.0]))

        async def batch_logw_next(self, contexts):
            return self.make_lazy_weights(np.full((len(contexts), 3), -1.0))

    p = Batched(AB)
    wrapped = autobatched(p)
    rows = await asyncio.gather(*(wrapped.logw_next(c) for c in ([], [b"a"], [b"b"])))
    assert [r[b"a"] for r in rows] == [-1.0, -1.0, -1.0]
    await p.assert_contract([[], [b"a"]])
    seqs = await direct_token_sampler(p).smc(4, 0.5, 3, seed=0)
    assert len(seqs) == 4


def test_autobatched_none_is_none():
    assert autobatched(None) is None


# Coerced(potential, target_vocab=..., tables=...) ----------------------------


async def test_coerced_takes_target_vocab_and_tables():
    inner = Tabular([b"a"[0], b"b"[0]], {(97, 98): 1.0})
    c = Coerced(inner, target_vocab=[b"aa", b"ab", b"b"], f=lambda seq: [t[0] for t in seq])
    assert set(c.vocab) == {b"aa", b"ab", b"b"}
    assert await c.complete([b"ab", b"b"]) == pytest.approx(0.0)
    tables = Potential.build_tables([b"a", b"b"])
    shared = Coerced(inner, [b"a", b"b"], lambda seq: list(b"".join(seq)), True, None, None, tables)
    assert shared.tables is tables
    with pytest.raises(ValueError, match="another vocabulary"):
        Coerced(inner, [b"b", b"a"], lambda seq: list(b"".join(seq)), tables=tables)
    with pytest.raises(TypeError, match="one target"):
        Coerced(inner, f=b"".join)


def test_no_deprecation_warnings_on_the_0_4_1_forms():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        BoolFSA.from_regex("ab")
        SequenceModel(Scripted(), None, 5, True, None, 0)
