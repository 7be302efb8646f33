"""Carried states (`state_of`, `advance`, `logw_next_of`) agree with `logw_next`, and the
coerced trie walk over carried states equals the walk that replays contexts."""

import math

import numpy as np
import pytest
from genlm.grammar import WFSA as GrammarWFSA
from genlm.grammar import Float
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.core import random_tabular
from toys.counted import CountedRows, twins

from genlm.control import WCFG, WFSA, BoolCFG, BoolFSA, JsonSchema
from genlm.control.potential.coerce import Coerced, stateful_potential

NEG_INF = float("-inf")
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
    "required": ["a"],
}
ARITH = "1: S -> S + S\n1: S -> ( S )\n1: S -> D\n1: D -> 1\n1: D -> 2\n1: D -> D D\n"
WEIGHTED = "0.4: S -> a S b\n0.3: S -> c\n0.3: S -> S c\n"


def nondeterministic_wfsa():
    """A weighted automaton with two paths for 'a' and a cycle (not deterministic)."""
    m = GrammarWFSA(Float)
    m.add_I(0, 1.0)
    m.add_arc(0, 97, 1, 0.5)
    m.add_arc(0, 97, 0, 0.25)
    m.add_arc(1, 98, 0, 0.5)
    m.add_F(1, 0.5)
    m.add_F(0, 0.25)
    return m


MAKERS = {
    "wfsa-regex": lambda: WFSA.from_regex(r"(ab|a[cd]+)*e?"),
    "wfsa-nondeterministic": lambda: WFSA(nondeterministic_wfsa()),
    "boolfsa": lambda: BoolFSA.from_regex(r"[a-c]+( [a-c]+)*\."),
    "json": lambda: JsonSchema(SCHEMA, spelling="any"),
    "wcfg": lambda: WCFG.from_string(WEIGHTED),
    "boolcfg": lambda: BoolCFG.from_string(ARITH),
}
_BUILT: dict = {}


def potential(name):
    if name not in _BUILT:
        _BUILT[name] = MAKERS[name]()
    return _BUILT[name]


async def live_walk(p, choices):
    """The context that takes, at each step, the live byte (or EOS: stop) chosen by index."""
    ctx = []
    for c in choices:
        row = (await p.logw_next(ctx)).weights
        live = np.flatnonzero(row > NEG_INF)
        pick = int(live[c % len(live)])
        if pick == len(row) - 1:
            break
        ctx.append(pick)
    return ctx


@pytest.mark.parametrize("name", sorted(MAKERS))
@settings(max_examples=30, deadline=None)
@given(choices=st.lists(st.integers(0, 2**16), max_size=14), token=st.integers(0, 255))
async def test_carried_rows_equal_logw_next(name, choices, token):
    """`logw_next_of(advance(state_of(ctx), x)) == logw_next(ctx + [x]).weights`, and
    `advance(...) is None` exactly when `prefix(ctx + [x]) = -inf`."""
    p = potential(name)
    assert p.stateful
    ctx = await live_walk(p, choices)
    state = p.advance(p.state_of(ctx), token)
    if await p.prefix(ctx + [token]) == NEG_INF:
        assert state is None
        return
    assert state is not None
    got, want = p.logw_next_of(state), (await p.logw_next(ctx + [token])).weights
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(MAKERS))
@settings(max_examples=20, deadline=None)
@given(choices=st.lists(st.integers(0, 2**16), min_size=1, max_size=14))
async def test_state_of_agrees_along_a_path(name, choices):
    """Advancing from the empty context byte by byte gives, at every prefix, the rows of
    `state_of` and of `logw_next`, also after the potential's caches are cleared."""
    p = potential(name)
    ctx = await live_walk(p, choices)
    state = p.state_of([])
    for i in range(len(ctx) + 1):
        want = (await p.logw_next(ctx[:i])).weights
        np.testing.assert_array_equal(p.logw_next_of(state), want)
        np.testing.assert_array_equal(p.logw_next_of(p.state_of(ctx[:i])), want)
        if i < len(ctx):
            state = p.advance(state, ctx[i])
    p.clear_cache()
    np.testing.assert_array_equal(p.logw_next_of(state), (await p.logw_next(ctx)).weights)


@pytest.mark.parametrize("name", sorted(MAKERS))
async def test_dead_states(name):
    p = potential(name)
    dead = [b for b in range(256) if await p.prefix([b]) == NEG_INF][0]
    assert p.state_of([dead]) is None
    assert p.advance(p.state_of([]), dead) is None
    assert p.advance(None, 97) is None
    with pytest.raises(ValueError, match="dead state"):
        p.logw_next_of(None)
    with pytest.raises(TypeError, match="byte value"):
        p.advance(p.state_of([]), 256)
    with pytest.raises(TypeError, match="byte value"):
        p.state_of([b"a"])


async def test_base_potential_carries_no_state():
    items = random_tabular(list(b"ab"), np.random.default_rng(0))
    assert not items.stateful
    assert stateful_potential(items) is None
    for call in (
        lambda: items.state_of([]),
        lambda: items.advance(None, 97),
        lambda: items.logw_next_of(None),
    ):
        with pytest.raises(NotImplementedError, match="does not carry states"):
            call()
    fsa = BoolFSA.from_regex("ab")
    assert stateful_potential(fsa) is fsa
    view = fsa.to_autobatched()  # forwards the inner potential's states
    assert view.stateful and stateful_potential(view) is view
    assert view.logw_next_of(view.advance(view.state_of([]), 97)).tolist() == fsa.logw_next_of(
        fsa.advance(fsa.state_of([]), 97)
    ).tolist()


# The coerced trie walk ------------------------------------------------------


def token_vocab(alphabet: bytes, extra=()):
    """All strings of one and two bytes over `alphabet`, and `extra`."""
    one = [bytes([a]) for a in alphabet]
    two = one + [a + b for a in one for b in one]
    return two + [t for t in extra if t not in two]


PAIRS = {
    "wcfg": (
        lambda cls: cls.from_string(WEIGHTED),
        token_vocab(b"abc", [b"aacb", b"cbb", b""]),
        [[], [b"a"], [b"aa", b"c", b"b"], [b"c", b"cc"]],
    ),
    "boolcfg": (
        lambda cls: cls.from_string(ARITH),
        token_vocab(b"12+()", [b"(1+", b"12)", b"+(((", b""]),
        [[], [b"(1+"], [b"(", b"12", b"+2"], [b"1", b"2", b"+", b"(("]],
    ),
    "wfsa-nondeterministic": (
        lambda cls: cls(nondeterministic_wfsa()),
        token_vocab(b"abc", [b"aab", b"abab", b"ba"]),
        [[], [b"a"], [b"ab", b"a"], [b"aa", b"ab", b"aab"]],
    ),
    "json": (
        lambda cls: cls(SCHEMA, spelling="any"),
        token_vocab(b'{}[]"ab:1, ', [b'{"a', b'": 12', b', "b": ["', b"ab"]),
        [[], [b'{"a', b'": 12'], [b'{"a', b'": 12', b', "b": ["', b"ab"]],
    ),
}
CLASSES = {
    "wcfg": twins(WCFG, CountedRows),
    "boolcfg": twins(BoolCFG, CountedRows),
    "wfsa-nondeterministic": twins(WFSA, CountedRows),
    "json": twins(JsonSchema, CountedRows),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
async def test_coerced_walk_over_states_equals_the_replayed_walk(name):
    make, vocab, contexts = PAIRS[name]
    stateful_cls, replayed_cls = CLASSES[name]
    carried, replayed = make(stateful_cls), make(replayed_cls)
    walk = Coerced(carried, vocab, b"".join)
    replay = Coerced(replayed, vocab, b"".join)
    assert walk.homomorphic and replay.homomorphic
    for ctx in contexts:
        assert await walk.prefix(ctx) > NEG_INF, ctx
        got, want = (await walk.logw_next(ctx)).weights, (await replay.logw_next(ctx)).weights
        assert np.isfinite(got).sum() > 1
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
        for tok, w in zip(walk.vocab_eos[:-1], got):
            expect = await carried.prefix(list(b"".join(ctx + [tok]))) - await carried.prefix(
                list(b"".join(ctx))
            )
            assert math.isclose(w, expect, rel_tol=1e-9) if expect > NEG_INF else w == NEG_INF
    assert carried.asked == 0
    assert replayed.asked > 0


async def test_coerced_walk_over_an_autobatched_stateful_potential():
    fsa = CLASSES["wfsa-nondeterministic"][0](nondeterministic_wfsa())
    vocab = token_vocab(b"ab")
    walk = Coerced(fsa.to_autobatched(), vocab, b"".join)
    plain = Coerced(fsa, vocab, b"".join, homomorphic=False)
    for ctx in [[], [b"ab"], [b"a", b"ab"]]:
        got, want = (await walk.logw_next(ctx)).weights, (await plain.logw_next(ctx)).weights
        np.testing.assert_allclose(got, want, rtol=1e-9)
    assert fsa.asked == 0


async def test_coerced_walk_at_a_dead_context_raises():
    walk = Coerced(WCFG.from_string(WEIGHTED), [b"a", b"ab", b"c"], b"".join)
    with pytest.raises(ValueError, match="dead state"):
        await walk.logw_next([b"ab", b"ab"])
