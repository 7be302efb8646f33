import math
import re

import numpy as np
import pytest
import regex
from genlm.grammar import WFSA as GrammarWFSA
from genlm.grammar import Boolean, Float, Log
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.constraints import embedded_vocab

from genlm.control import EOS, WFSA, BoolFSA
from genlm.control.testing import check_potential

NEG_INF = float("-inf")

PATTERNS = [
    r"(ab|é)*c?",
    r"a.b",
    r"[^a]*x",
    r"\d{1,3}(\.\d+)?",
    r"(?i)hello",
    r"[a-c]+\s?[x-z]*",
    r"\w+@\w+\.(com|org)",
    r"ü+|[^\n]{2}",
    r"\u00e9+\N{LATIN SMALL LETTER U WITH DIAERESIS}?\0?",
    r"(?s)a.b|(?i:[^k]x)",
]
CHARS = "abcxyzABCHELOKkhelo.@0123 \n\té üß日\x00-"


def matches(pattern, text, partial):
    return regex.fullmatch(pattern, text, flags=regex.ASCII, partial=partial) is not None


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(CHARS) | st.characters(codec="utf-8"), max_size=7))
async def test_bool_fsa_agrees_with_regex_module(pattern, text):
    fsa = _cached(BoolFSA, pattern)
    ctx = list(text.encode("utf-8"))
    want_complete = 0.0 if matches(pattern, text, False) else NEG_INF
    want_prefix = 0.0 if matches(pattern, text, True) else NEG_INF
    assert await fsa.complete(ctx) == want_complete
    assert await fsa.prefix(ctx) == want_prefix


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=30, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(CHARS), max_size=6))
async def test_weighted_fsa_has_the_same_support_as_the_regex(pattern, text):
    fsa = _cached(WFSA, pattern)
    ctx = list(text.encode("utf-8"))
    assert (await fsa.complete(ctx) > NEG_INF) == matches(pattern, text, False)
    assert (await fsa.prefix(ctx) > NEG_INF) == matches(pattern, text, True)


_FSAS: dict = {}


def _cached(cls, pattern):
    key = (cls, pattern)
    if key not in _FSAS:
        _FSAS[key] = cls.from_regex(pattern)
    return _FSAS[key]


async def test_regex_weights_by_hand():
    # q0 -a-> q1 (one choice), q1 -b-> / -c-> final states (two choices, 1/2 each).
    fsa = WFSA.from_regex("ab|ac")
    assert await fsa.prefix([]) == pytest.approx(0.0)
    assert await fsa.prefix(list(b"a")) == pytest.approx(0.0)
    assert await fsa.complete(list(b"ab")) == pytest.approx(math.log(0.5))
    row = await fsa.logw_next(list(b"a"))
    assert row[ord("b")] == pytest.approx(math.log(0.5))
    assert row[ord("c")] == pytest.approx(math.log(0.5))
    assert row[EOS] == NEG_INF
    assert np.sum(np.exp(row.weights)) == pytest.approx(1.0)


async def test_regex_weights_are_a_distribution_over_a_finite_language():
    fsa = WFSA.from_regex("a|ab|abc|b(c|d)")
    words = [b"a", b"ab", b"abc", b"bc", b"bd"]
    total = sum([math.exp(await fsa.complete(list(w))) for w in words])
    assert total == pytest.approx(1.0)


def nondeterministic(semiring, lift):
    m = GrammarWFSA(semiring)
    m.add_I(0, lift(1.0))
    m.add_arc(0, 97, 1, lift(0.5))
    m.add_arc(0, 97, 0, lift(0.25))
    m.add_F(1, lift(1.0))
    m.add_F(0, lift(0.25))
    return m


@pytest.mark.parametrize(
    "semiring,lift", [(Float, float), (Log, lambda w: Log(math.log(w)))], ids=["float", "log"]
)
async def test_nondeterministic_weights_by_hand(semiring, lift):
    # beta0 = 0.25 + 0.5 + 0.25 beta0 = 1; prefix("a") = 0.25 beta0 + 0.5 = 0.75;
    # complete("a") = 0.5 * 1 + 0.25 * 0.25 = 0.5625.
    fsa = WFSA(nondeterministic(semiring, lift))
    assert await fsa.prefix([]) == pytest.approx(0.0)
    assert await fsa.prefix([97]) == pytest.approx(math.log(0.75))
    assert await fsa.complete([97]) == pytest.approx(math.log(0.5625))
    assert await fsa.complete([97, 97]) == pytest.approx(math.log(0.25 * 0.5625))
    assert await fsa.prefix([98]) == NEG_INF
    await check_potential(fsa, [[], [97], [97, 97, 97], [98]])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([97, 98]), max_size=60))
async def test_incremental_forward_equals_genlm_grammar(xs):
    m = nondeterministic(Float, float)
    m.add_arc(1, 98, 0, 0.5)
    fsa, fresh = _nondet_pair(m)
    want = m(xs)
    got = await fsa.complete(xs)
    assert got == (pytest.approx(math.log(want)) if want > 0 else NEG_INF)
    assert await fresh.complete(xs) == pytest.approx(got) if want > 0 else True
    assert await fsa.prefix(xs) == pytest.approx(await fresh.prefix(xs))


_PAIR: list = []


def _nondet_pair(m):
    if not _PAIR:
        _PAIR.extend([WFSA(m, cache_size=4), WFSA(m, cache_size=1)])
    return _PAIR


async def test_character_labels_are_converted_to_bytes():
    m = GrammarWFSA(Boolean)
    m.add_I(0, Boolean.one)
    m.add_arc(0, "é", 1, Boolean.one)
    m.add_F(1, Boolean.one)
    fsa = BoolFSA(m)
    assert await fsa.complete(list("é".encode())) == 0.0
    assert await fsa.prefix(list("é".encode())[:1]) == 0.0
    assert await fsa.complete(list("é".encode())[:1]) == NEG_INF


@pytest.mark.parametrize("pattern", ["ab|é", r"[^a]*x", r"\d+"])
async def test_check_potential_on_byte_contexts(pattern):
    for cls in (WFSA, BoolFSA):
        fsa = cls.from_regex(pattern)
        await check_potential(fsa, [[], list(b"a"), list("é".encode())[:1], list(b"12"), list(b"zz")])


async def test_long_context_with_a_tiny_cache_is_exact():
    fsa = BoolFSA.from_regex(r"(ab)*", cache_size=2)
    ctx = list(b"ab" * 200)
    assert await fsa.complete(ctx) == 0.0
    assert await fsa.prefix(ctx + [97]) == 0.0
    assert await fsa.prefix(ctx + [98]) == NEG_INF
    assert len(fsa._cache) <= 2


async def test_coerced_onto_the_embedded_vocabulary():
    vocab = embedded_vocab()
    fsa = BoolFSA.from_regex(r"[a-z ]+(\.|!)")
    coerced = fsa.coerce(vocab, f=b"".join)
    by_bytes = {bytes(t): t for t in vocab}
    ctx = [by_bytes[b"the"]] if b"the" in by_bytes else [vocab[0]]
    row = await coerced.logw_next(ctx)
    base = list(b"".join(ctx))
    for tok in vocab[::37]:
        want = await fsa.prefix(base + list(tok))
        assert row[tok] == want
        assert (want == 0.0) == matches(r"[a-z ]+(\.|!)", bytes(base + list(tok)).decode("latin-1"), True)
    await check_potential(coerced, [[], ctx], top=50)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
async def test_coerced_token_sequences_agree_with_regex(data):
    vocab = embedded_vocab()
    pattern = r"[a-z ]*(\.|, )?[a-z]*"
    coerced = _coerced(pattern, vocab)
    toks = data.draw(st.lists(st.sampled_from(vocab), max_size=5))
    raw = b"".join(toks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        assert await coerced.complete(toks) == NEG_INF
        return
    assert (await coerced.complete(toks) == 0.0) == matches(pattern, text, False)
    assert (await coerced.prefix(toks) == 0.0) == matches(pattern, text, True)


_COERCED: dict = {}


def _coerced(pattern, vocab):
    if pattern not in _COERCED:
        _COERCED[pattern] = BoolFSA.from_regex(pattern).coerce(vocab, f=b"".join)
    return _COERCED[pattern]


@pytest.mark.parametrize(
    "pattern,words",
    [
        ("(ab", ["invalid regex", "(ab"]),
        ("a**", ["invalid regex", "multiple repeat"]),
        ("a(?=b)", ["lookahead"]),
        ("a^b", ["anchors"]),
        (r"a\bb", ["anchors"]),
        ("(?:^a)+", ["anchors"]),
        (r"(a)\1", ["group references"]),
        (r"a[^\s\S]", ["matches no string"]),
    ],
)
def test_bad_regex_is_a_value_error_naming_the_problem(pattern, words):
    with pytest.raises(ValueError) as info:
        BoolFSA.from_regex(pattern)
    for w in words:
        assert w in str(info.value)


async def test_bad_inputs():
    fsa = BoolFSA.from_regex("ab")
    with pytest.raises(TypeError, match="byte value"):
        await fsa.prefix([b"a"])
    with pytest.raises(TypeError, match="byte value"):
        await fsa.prefix([300])
    with pytest.raises(ValueError, match="weight zero"):
        await fsa.logw_next([120])
    with pytest.raises(ValueError, match="cache size"):
        BoolFSA.from_regex("ab", cache_size=0)
    with pytest.raises(TypeError, match="must be a str"):
        BoolFSA.from_regex(b"ab")
    m = GrammarWFSA(Float)
    m.add_I(0, 1.0)
    m.add_arc(0, 97, 0, 1.0)
    m.add_F(0, 1.0)
    with pytest.raises(ValueError, match="diverges"):
        WFSA(m)
    assert await BoolFSA(m).complete([97, 97]) == 0.0


async def test_spawn_shares_the_automaton_not_the_cache():
    fsa = WFSA.from_regex("a+b")
    await fsa.prefix(list(b"aaa"))
    copy = fsa.spawn()
    assert copy.automaton is fsa.automaton and len(copy._cache) == 0
    assert await copy.prefix(list(b"aaa")) == await fsa.prefix(list(b"aaa"))


SMALL_VOCAB = [b"a", b"ab", b"b", b"ba", b"c", b"", "é".encode(), "é".encode()[:1], b"x\n", b"12"]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("cls", [WFSA, BoolFSA])
async def test_compiled_coercion_equals_the_trie_walk(pattern, cls):
    from genlm.control.constraints.fsa._fsa_coerce import CoercedDFA
    from genlm.control.potential import Coerced

    fsa = _cached(cls, pattern)
    fast = fsa.coerce(SMALL_VOCAB, f=b"".join)
    slow = Coerced(fsa, SMALL_VOCAB, b"".join)
    assert isinstance(fast, CoercedDFA) and not isinstance(slow, CoercedDFA)
    rng = np.random.default_rng(0)
    contexts = [[]] + [list(rng.choice(SMALL_VOCAB[:6], size=k)) for k in (1, 2, 3, 4)]
    live = [c for c in contexts if await slow.prefix(c) > NEG_INF]
    for c in live:
        (await fast.logw_next(c)).assert_equal(await slow.logw_next(c), rtol=1e-9, atol=1e-12)
    await check_potential(fast, contexts)
    copy = fast.spawn()
    assert isinstance(copy, CoercedDFA) and len(copy._rows) == 0


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("cls", [WFSA, BoolFSA])
async def test_states_kept_per_image_equal_the_forward_walk(pattern, cls):
    """`CoercedDFA._state` steps a context's last token from its parent's kept state:
    on contexts extended token by token (empty tokens, a split UTF-8 character, dead
    contexts and their extensions included) and on contexts asked cold, in random
    order, it equals the state read from the automaton's forward vector, and the
    prefix and complete weights read from it (a Boolean automaton's) equal the
    automaton's own on the context's bytes; a spawn starts with nothing kept."""
    fsa = _cached(cls, pattern)
    fast = fsa.coerce(SMALL_VOCAB, f=b"".join)
    rng = np.random.default_rng(7)
    paths = [list(rng.choice(len(SMALL_VOCAB), size=6)) for _ in range(40)]
    asked = []
    for path in paths:  # as SMC asks: every prefix, one token more each time
        asked += [[SMALL_VOCAB[i] for i in path[:k]] for k in range(len(path) + 1)]
    cold = [[SMALL_VOCAB[i] for i in rng.choice(len(SMALL_VOCAB), size=int(k))] for k in rng.integers(1, 8, 60)]
    order = rng.permutation(len(asked) + len(cold))
    every = asked + cold
    for j in [*range(len(asked)), *order.tolist()]:
        context = every[j]
        assert fast._state(context) == fast._forward_state(b"".join(context)), context
    for context in every[:80] + cold:
        data = list(b"".join(context))
        assert await fast.prefix(context) == await fsa.prefix(data)
        assert await fast.complete(context) == await fsa.complete(data)
    assert (await fast.batch_prefix(cold)).tolist() == [await fsa.prefix(list(b"".join(c))) for c in cold]
    assert (await fast.batch_complete(cold)).tolist() == [await fsa.complete(list(b"".join(c))) for c in cold]
    assert (len(fast._by_image) > 0) == (cls is BoolFSA)  # a weighted one reads its forward vectors
    assert "_by_image" not in fast.spawn().__dict__


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("cls", [WFSA, BoolFSA])
async def test_allowed_next_agrees_with_prefix_and_complete(pattern, cls):
    fsa = _cached(cls, pattern)
    rng = np.random.default_rng(1)
    contexts = [[]] + [list(rng.choice(SMALL_VOCAB[:6], size=k)) for k in (1, 2, 3)]
    eos = len(SMALL_VOCAB)
    for c in contexts:
        # A fresh coercion per context: the first call walks bytes (few tokens, no
        # cached row), the second reads the row it then caches.
        fast = fsa.coerce(SMALL_VOCAB, f=b"".join)
        if await fast.prefix(c) == NEG_INF:
            assert not np.any(await fast.allowed_next(c, list(range(eos + 1))))
            continue
        want = [await fast.prefix([*c, x]) > NEG_INF for x in SMALL_VOCAB] + [await fast.complete(c) > NEG_INF]
        for indices in ([3, eos, 0], list(range(eos + 1)), [5, 1]):
            got = await fast.allowed_next(c, indices)
            assert list(got) == [want[i] for i in indices], (c, indices)


# Random patterns against Python's `re` ----------------------------------------

ATOMS = ["a", "b", "é", ".", "[ab]", "[^a]", r"\d", r"\w", r"\s", r"\W", "[a-cé]", "(?:)"]


def _patterns():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"])).map(
                lambda p: f"(?:{p[0]}){p[1]}"
            ),
            st.tuples(st.sampled_from(["i", "s", "is"]), inner).map(lambda p: f"(?{p[0]}:{p[1]})"),
            inner.map(lambda p: f"({p})"),
        )

    return st.recursive(st.sampled_from(ATOMS), extend, max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(pattern=_patterns(), texts=st.lists(st.text(alphabet="abAB1 \né_", max_size=6), max_size=8))
def test_compiled_dfa_agrees_with_re_on_random_patterns(pattern, texts):
    from genlm.control.constraints.regex.compile import compile_regex

    try:
        dfa = compile_regex(pattern)
    except ValueError as e:
        assert "matches no string" in str(e)
        return
    for text in texts:
        q, ok = 0, True
        for b in text.encode():
            q = int(dfa.delta[q, b])
            if q < 0:
                ok = False
                break
        got = ok and bool(dfa.final[q])
        assert got == (re.fullmatch(pattern, text, re.ASCII) is not None), (pattern, text)


def test_weights_are_a_property_of_the_language_not_the_automaton():
    """`WFSA.from_regex` weights depend on the live next bytes only, so two spellings
    of one language give one distribution."""
    import asyncio

    a, b = WFSA.from_regex("(a|ab)(c|bcd)"), WFSA.from_regex("a(c|bc|bcd|bbcd)")
    for text in [b"ac", b"abc", b"abcd", b"abbcd"]:
        assert asyncio.run(a.complete(list(text))) == pytest.approx(asyncio.run(b.complete(list(text))))


def test_wfsa_of_a_regex_is_built_on_demand():
    fsa = BoolFSA.from_regex("ab|c")
    assert sorted(BoolFSA(fsa.wfsa).automaton.stop) == sorted(fsa.automaton.stop)
