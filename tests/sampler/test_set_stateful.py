"""Set samplers over a stateful item potential: carried states give the same sets, draws
and exact enumeration as replaying contexts, without one async row request."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.counted import twins
from toys.tables import NextTable, SetAsTokens, random_rows

from genlm.control import WCFG, WFSA, BoolFSA, JsonSchema
from genlm.control.draw import using_rng
from genlm.control.sampler.set import EagerSetSampler, SetTokenSampler, TopKSetSampler
from genlm.control.testing import assert_properly_weighted, enumerate_sampler, expected_logws

NEG_INF = float("-inf")


ABC_VOCAB = [b"a", b"ab", b"abc", b"b", b"ba", b"c", b"bc", b"cab", b"cc"]
JSON_VOCAB = [b"[", b'"', b"a", b"ab", b'",', b'"]', b"]", b'b"', b" ", b'["a', b",", b'"a"']
CASES = {
    "wfsa": (
        twins(WFSA),
        lambda cls: cls.from_regex(r"(ab|a[bc]+)*c?"),
        ABC_VOCAB,
        [[], [b"ab"], [b"abc", b"ab"], [b"a", b"cc", b"ab"]],
    ),
    "boolfsa": (
        twins(BoolFSA),
        lambda cls: cls.from_regex(r"[ab]+c[abc]*"),
        ABC_VOCAB,
        [[], [b"a"], [b"ab", b"c"], [b"abc", b"cab", b"bc"]],
    ),
    "wcfg": (
        twins(WCFG),
        lambda cls: cls.from_string("0.4: S -> a S b\n0.3: S -> c\n0.3: S -> S c\n"),
        ABC_VOCAB,
        [[], [b"a"], [b"a", b"ac"], [b"cc", b"c"]],
    ),
    "json": (
        twins(JsonSchema),
        lambda cls: cls({"type": "array", "items": {"type": "string", "maxLength": 3}}),
        JSON_VOCAB,
        [[], [b"["], [b'["a', b'",'], [b"[", b" ", b'"a"', b",", b'"']],
    ),
}
KINDS = ["eager", 1, 3]


def samplers(name, kind, seed=0, lm_zero=0.2):
    """The set samplers over the stateful and the replaying item potential, and both."""
    (carried_cls, replayed_cls), make, vocab, _ = CASES[name]
    llm = NextTable(vocab, random_rows(len(vocab), seed, lm_zero))
    items = make(carried_cls), make(replayed_cls)
    if kind == "eager":
        return [EagerSetSampler(llm, p) for p in items], items
    return [TopKSetSampler(llm, p, kind) for p in items], items


async def live(name, items):
    contexts = CASES[name][3]
    got = [c for c in contexts if await items.prefix(list(b"".join(c))) > NEG_INF]
    assert len(got) == len(contexts), "every listed context is live"
    items.asked = 0
    return got


def assert_same_set(a, b):
    """The same tokens, weights and choice probability, up to float rounding: the
    weighted grammar's Earley charts sum in an order that follows Python's string
    hashing, and its carried and replayed rows are computed by different sums, so
    they can differ in the last bits (about 1e-12 relative under PYTHONHASHSEED=14)."""
    assert a.tokens == b.tokens
    np.testing.assert_allclose(a.logws, b.logws, rtol=1e-9, atol=0)
    assert a.logp == pytest.approx(b.logp, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(CASES))
async def test_carried_states_give_the_same_sets_without_async_calls(name, kind):
    (carried_sampler, replayed_sampler), (carried, replayed) = samplers(name, kind)
    assert carried_sampler.carrier is carried and replayed_sampler.carrier is None
    for ctx in await live(name, carried):
        for seed in range(6):
            with using_rng(np.random.default_rng(seed)):
                a = await carried_sampler.sample_set(ctx)
            with using_rng(np.random.default_rng(seed)):
                b = await replayed_sampler.sample_set(ctx)
            assert_same_set(a, b)
        assert await carried_sampler.logw_eos(ctx) == await replayed_sampler.logw_eos(ctx)
    assert carried.asked == 0
    assert replayed.asked > 0


@pytest.mark.parametrize("name", sorted(CASES))
async def test_seeded_draws_are_identical(name):
    (carried_sampler, replayed_sampler), (carried, _) = samplers(name, 2, seed=3)
    tokens = [SetTokenSampler(s) for s in (carried_sampler, replayed_sampler)]

    async def run(sampler, ctx):
        with using_rng(np.random.default_rng(11)):
            return [await sampler.sample(ctx) for _ in range(15)]

    for ctx in await live(name, carried):
        assert await run(tokens[0], ctx) == await run(tokens[1], ctx)
    assert carried.asked == 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(CASES))
async def test_exact_enumeration_is_identical_and_properly_weighted(name, kind):
    (carried_sampler, replayed_sampler), (carried, _) = samplers(name, kind, seed=5)
    for ctx in await live(name, carried):
        sets = [
            await enumerate_sampler(SetAsTokens(s), ctx)
            for s in (carried_sampler, replayed_sampler)
        ]
        # equal up to float rounding (see `assert_same_set`)
        assert sets[0] == pytest.approx(sets[1], rel=1e-9, abs=1e-12)
        tokens = [SetTokenSampler(s) for s in (carried_sampler, replayed_sampler)]
        draws = [await enumerate_sampler(t, ctx) for t in tokens]
        assert draws[0] == pytest.approx(draws[1], rel=1e-9, abs=1e-12)
        exact = await expected_logws(tokens[0], ctx)
        for token, v in exact.items():
            assert np.exp(sets[0].get(token, NEG_INF)) == pytest.approx(
                np.exp(v), rel=1e-9, abs=1e-12
            )
        await assert_properly_weighted(tokens[0], ctx)


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(sorted(CASES)),
    st.sampled_from(KINDS),
    st.integers(0, 2**16),
    st.sampled_from([0.0, 0.5]),
    st.integers(0, 3),
)
async def test_random_language_models_give_identical_sets(name, kind, seed, lm_zero, which):
    (carried_sampler, replayed_sampler), (carried, _) = samplers(name, kind, seed, lm_zero)
    ctx = (await live(name, carried))[which]
    for rng_seed in range(3):
        with using_rng(np.random.default_rng(rng_seed)):
            a = await carried_sampler.sample_set(ctx)
        with using_rng(np.random.default_rng(rng_seed)):
            b = await replayed_sampler.sample_set(ctx)
        assert_same_set(a, b)
    assert carried.asked == 0


async def test_dead_context_raises_as_the_replayed_walk_does():
    (carried_sampler, replayed_sampler), _ = samplers("boolfsa", "eager")
    for sampler in (carried_sampler, replayed_sampler):
        with pytest.raises(ValueError, match="weight zero|dead state"):
            await sampler.sample_set([b"cc"])


class CountedRows(BoolFSA):
    """A BoolFSA counting its carried-state calls."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.carried_calls = 0

    def advance(self, state, token):
        self.carried_calls += 1
        return super().advance(state, token)

    def logw_next_of(self, state):
        self.carried_calls += 1
        return super().logw_next_of(state)


async def test_carried_rows_are_reused_at_the_same_context():
    llm = NextTable(ABC_VOCAB, random_rows(len(ABC_VOCAB), 2, 0.0))
    items = CountedRows.from_regex(r"[ab]+c[abc]*")
    sampler = TopKSetSampler(llm, items, 2, memo_size=1)
    reference = TopKSetSampler(llm, BoolFSA.from_regex(r"[ab]+c[abc]*"), 2)
    contexts = [[b"a"], [b"ab", b"c"]]
    for ctx in contexts + contexts:  # memo_size=1: each context evicts the other
        for seed in range(4):
            with using_rng(np.random.default_rng(seed)):
                a = await sampler.sample_set(ctx)
            with using_rng(np.random.default_rng(seed)):
                b = await reference.sample_set(ctx)
            assert_same_set(a, b)
    calls = items.carried_calls
    assert calls > 0
    with using_rng(np.random.default_rng(0)):
        await sampler.sample_set(contexts[-1])
    assert items.carried_calls == calls  # every visited node's row is memoized
    sampler.cleanup()
    with using_rng(np.random.default_rng(0)):
        await sampler.sample_set(contexts[-1])
    assert items.carried_calls > calls


def test_bad_memo_size():
    llm = NextTable(ABC_VOCAB, random_rows(len(ABC_VOCAB), 0, 0.0))
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="memo_size"):
            EagerSetSampler(llm, BoolFSA.from_regex("a+"), memo_size=bad)
