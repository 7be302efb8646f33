"""GuidedConstraint (compiled engine) against the generic coerced potentials on the
embedded model's tokens: differential tests on Hypothesis token sequences, the
documented differences, the potential contract, state caching and bad input."""

import logging
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest.importorskip("llguidance")

from genlm.control import BoolCFG, BoolFSA, JsonSchema  # noqa: E402
from genlm.control.constant import EOS  # noqa: E402
from genlm.control.engine._guided_regex import (  # noqa: E402
    ascii_classes,
    complement,
    engine_regex,
)
from genlm.control.engine.guided import GuidedCoerced, GuidedConstraint  # noqa: E402
from genlm.control.potential import Coerced  # noqa: E402
from genlm.control.weights import NEG_INF  # noqa: E402

HYP = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def split(pieces, text: bytes, cuts: list[int]) -> list:
    """`text` as tokens: cut at `cuts`, each piece a token when the vocabulary has it,
    else its single bytes."""
    bounds = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    toks = []
    for a, b in zip(bounds, bounds[1:]):
        piece = text[a:b]
        toks.extend([pieces[piece]] if piece in pieces else [pieces[bytes([x])] for x in piece])
    return toks


async def assert_same(engine, generic, context, rows=True):
    """Same prefix and complete at every prefix of `context`, and the same
    `logw_next` row wherever the prefix is alive."""
    for k in range(len(context) + 1):
        ctx = context[:k]
        p = await generic.prefix(ctx)
        assert await engine.prefix(ctx) == p, ctx
        assert await engine.complete(ctx) == await generic.complete(ctx), ctx
        if p == NEG_INF:
            return
        if rows:
            # a generic coercion may be pruned to the grammar's alphabet: the tokens it
            # lacks must be refused by the engine
            a, b = await engine.logw_next(ctx), await generic.logw_next(ctx)
            want = dict(zip(generic.vocab_eos, b.weights))
            assert want.keys() <= set(engine.vocab_eos)
            diff = [t for t, w in zip(engine.vocab_eos, a.weights) if w != want.get(t, NEG_INF)]
            assert not diff, (ctx, diff[:5])


# Regex -----------------------------------------------------------------------

PATTERNS = [
    r"[a-z]+ \d{2,3}",
    r"(ab|a)(bc|c)*\.",
    r"[^a\n]{1,4}x?",
    r"\w+@\w+\.(com|org)",
    r"-?(0|[1-9]\d*)(\.\d+)?",
    r"(\s|[éü€])*é.",
]
REGEX_TEXT = st.text(alphabet="abcxz019 .@-\néü€\t_", max_size=12)


@pytest.mark.parametrize("pattern", PATTERNS)
@HYP
@given(text=REGEX_TEXT, cuts=st.lists(st.integers(0, 40), max_size=6))
async def test_regex_agrees_with_the_coerced_automaton(llm, pieces, pattern, text, cuts):
    fsa = BoolFSA.from_regex(pattern)
    engine, generic = fsa.coerce(llm, f=b"".join), fsa.coerce(llm, f=b"".join, engine=False)
    assert isinstance(engine, GuidedCoerced) and not isinstance(generic, GuidedCoerced)
    assert isinstance(engine, Coerced) and isinstance(generic, Coerced)
    await assert_same(engine, generic, split(pieces, text.encode(), cuts))


@pytest.mark.parametrize("pattern", PATTERNS)
async def test_regex_agrees_along_a_sampled_path(llm, pattern):
    """Contexts drawn from the constraint itself (every step alive)."""
    rng = np.random.default_rng(0)
    fsa = BoolFSA.from_regex(pattern)
    engine, generic = fsa.coerce(llm, f=b"".join), fsa.coerce(llm, f=b"".join, engine=False)
    ctx = []
    for _ in range(8):
        row = (await generic.logw_next(ctx)).weights
        assert np.array_equal((await engine.logw_next(ctx)).weights, row)
        live = np.flatnonzero(row[:-1] == 0)
        if not len(live):
            break
        ctx = ctx + [generic.vocab[int(rng.choice(live))]]


async def test_a_regex_means_the_same_on_the_engine_and_the_automaton(llm, pieces):
    """`^`/`$` at the edges are redundant in a full match and `\\d` is ASCII on every
    path: "٣" (an Arabic-Indic digit) is no digit for the engine either."""
    generic = BoolFSA.from_regex(r"\d+").coerce(llm, f=b"".join, engine=False)
    for engine in (llm.constrain(regex=r"^\d+$"), GuidedConstraint.from_regex(llm, r"\A\d+\Z")):
        for text in ("12", "٣", "1٣", "", "12\n"):
            await assert_same(engine, generic, split(pieces, text.encode(), []))
        assert await engine.complete(split(pieces, "٣".encode(), [])) == NEG_INF
    anchored, plain = BoolFSA.from_regex(r"^\d+$"), BoolFSA.from_regex(r"\d+")
    for text in (b"12", "٣".encode(), b"", b"7\n", b"x"):
        assert await anchored.complete(list(text)) == await plain.complete(list(text))
        assert await anchored.prefix(list(text)) == await plain.prefix(list(text))


@pytest.mark.parametrize("pattern", [r"a^b", r"\bx", r"x(?=y)", r"(a)\1"])
def test_a_regex_the_automaton_refuses_is_refused_by_the_engine_too(llm, pattern):
    with pytest.raises(ValueError, match="does not express") as info:
        GuidedConstraint.from_regex(llm, pattern)
    with pytest.raises(ValueError) as same:
        BoolFSA.from_regex(pattern)
    assert str(info.value) == str(same.value)
    with pytest.raises(ValueError, match="does not express"):
        llm.constrain(regex=pattern)


def test_regex_rewriting():
    assert engine_regex("a") == r"\x{61}"
    assert engine_regex(r"\d") == r"[\x{30}-\x{39}]"
    assert engine_regex("[^a]") == r"[\x{0}-\x{60}\x{62}-\x{D7FF}\x{E000}-\x{10FFFF}]"
    assert engine_regex("a|bc") == r"(?:\x{61}|\x{62}\x{63})"
    assert engine_regex("a{2,}?") == r"(?:\x{61}){2,}"
    assert engine_regex("(?i)a") == r"[\x{41}\x{61}]"
    assert engine_regex("(?s).") == r"[\x{0}-\x{D7FF}\x{E000}-\x{10FFFF}]"
    assert engine_regex("\ud800") == r"[^\x{0}-\x{10FFFF}]"  # no UTF-8 text: the empty class
    for unsupported in ["a*+", "(?>a)", "(a)\\1", "a^", "$a", r"a\Zb", "(?=a)a"]:
        assert engine_regex(unsupported) is None, unsupported
    for redundant in ["^a", "a$", r"\Aa\Z", "(?:^a)$"]:  # edge anchors of a full match
        assert engine_regex(redundant) == r"\x{61}", redundant
    assert complement([(0, 9), (5, 20)]) == [(21, 0x10FFFF)]
    assert ascii_classes(r"/\d[\s]\\d\./") == r"/[0-9][[\t\n\x0B\x0C\r ]]\\d\./"


async def test_inexact_lark_takes_the_generic_path_and_says_why(llm, caplog):
    cfg = BoolCFG.from_lark("start: A A\nA: /é+/")
    with caplog.at_level(logging.DEBUG, logger="genlm.control.engine.guided"):
        c = cfg.coerce(llm, f=b"".join)
    assert not isinstance(c, GuidedCoerced)
    assert "generic path" in caplog.text and "maximal munch" in caplog.text
    assert isinstance(cfg.coerce(llm, f=b"".join, engine=True), GuidedCoerced)


async def test_non_llm_targets_and_maps_take_the_generic_path(llm):
    fsa = BoolFSA.from_regex("ab")
    assert not isinstance(fsa.coerce(list(llm.vocab), f=b"".join), GuidedCoerced)
    assert not isinstance(fsa.coerce(llm, f=lambda xs: b"".join(xs)), GuidedCoerced)
    with pytest.raises(ValueError, match="not a PromptedLLM"):
        fsa.coerce(list(llm.vocab), f=b"".join, engine=True)
    assert not isinstance(BoolFSA(fsa.wfsa).coerce(llm, f=b"".join), GuidedCoerced)


# Lark ------------------------------------------------------------------------

LARK = r"""
start: expr
expr: term (("+" | "-") term)*
term: NUMBER | "(" expr ")"
NUMBER: /\d+/
"""


@HYP
@given(
    text=st.text(alphabet="0123+-()٣x", max_size=10), cuts=st.lists(st.integers(0, 30), max_size=5)
)
async def test_lark_agrees_with_earley(llm, pieces, text, cuts):
    """Prefix and complete against byte-level Earley (the grammar's lexing is unambiguous)."""
    engine = BoolCFG.from_lark(LARK).coerce(llm, f=b"".join)
    assert isinstance(engine, GuidedCoerced)
    generic = BoolCFG.from_lark(LARK)
    toks = split(pieces, text.encode(), cuts)
    for k in range(len(toks) + 1):
        data = list(b"".join(toks[:k]))
        p = await generic.prefix(data)
        assert await engine.prefix(toks[:k]) == p
        assert await engine.complete(toks[:k]) == await generic.complete(data)
        if p == NEG_INF:
            break


async def test_lark_rows_agree_with_the_coerced_grammar(llm):
    cfg = BoolCFG.from_lark(LARK)
    engine, generic = cfg.coerce(llm, f=b"".join), cfg.coerce(llm, f=b"".join, engine=False)
    await assert_same(engine, generic, llm.tokenize("(12+3)-4"))


async def test_lark_engine_only_where_exact(llm, pieces):
    """Grammars whose terminals compete for text (maximal munch would cut them
    differently) take the engine by default with the clashing terminals lowered to
    one-byte rules, so the splits the lexer would refuse are accepted, as by Earley.
    A clash on non-ASCII terminals is not lowered: Earley by default; `engine=True`
    takes the engine, whose lexer refuses the split. `%ignore` is read the same on
    both paths (before every terminal and at the end), so it keeps the engine."""
    greedy = "start: A A\nA: /a+/"
    words = "start: WORD WORD\nWORD: /[a-z]+/"
    for grammar, text in [(greedy, b"aa"), (words, b"abc")]:
        cfg = BoolCFG.from_lark(grammar)
        toks = split(pieces, text, list(range(len(text))))
        coerced = cfg.coerce(llm, f=b"".join)
        assert isinstance(coerced, GuidedCoerced)
        assert await cfg.complete(list(text)) == await coerced.complete(toks) == 0.0
    cfg = BoolCFG.from_lark("start: A A\nA: /é+/")
    text = "éé".encode()
    toks = split(pieces, text, list(range(len(text))))
    assert await cfg.complete(list(text)) == 0.0
    assert await cfg.coerce(llm, f=b"".join).complete(toks) == 0.0  # exact: Earley
    assert await cfg.coerce(llm, f=b"".join, engine=True).complete(toks) == NEG_INF
    cfg = BoolCFG.from_lark('start: "x" "y"\n%ignore " "')
    engine = cfg.coerce(llm, f=b"".join)
    assert isinstance(engine, GuidedCoerced)
    for text in [b"x y ", b" x y", b"x  y", b" xy  "]:
        toks = split(pieces, text, list(range(len(text))))
        assert await engine.complete(toks) == await cfg.complete(list(text)) == 0.0


# JSON ------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "tag": {"enum": ["red", "blue"]},
        "note": {"type": "string", "maxLength": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["id"],
    "additionalProperties": False,
}
DOCS = st.builds(
    lambda i, tag, note, ok, ws: (
        ws
        + (
            "{"
            + ",".join(
                x
                for x in [
                    f'"id":{i}',
                    tag and f'"tag":"{tag}"',
                    note is not None and f'"note":{note}',
                    ok is not None and f'"ok":{ok}',
                ]
                if x
            )
            + "}"
        )
        + ws
    ),
    st.integers(0, 1200),
    st.sampled_from([None, "red", "blue", "green"]),
    st.one_of(
        st.none(), st.sampled_from(['"ab"', '"abcd"', '"é"', '"\\u0041"', '"\\n"', '"', "1"])
    ),
    st.one_of(st.none(), st.sampled_from(["true", "false", "nul"])),
    st.sampled_from(["", " ", "\n"]),
)


@HYP
@given(doc=DOCS, cuts=st.lists(st.integers(0, 60), max_size=8))
async def test_json_agrees_with_the_schema_potential(llm, pieces, doc, cuts):
    """Documents with properties in declaration order: the same answers everywhere."""
    js = JsonSchema(SCHEMA, spelling="any")
    engine, generic = js.coerce(llm, f=b"".join, engine=True), js.coerce(llm, f=b"".join, engine=False)
    assert isinstance(engine, GuidedCoerced)
    await assert_same(engine, generic, split(pieces, doc.encode(), cuts), rows=False)


async def test_json_rows_agree_in_declaration_order(llm, pieces):
    js = JsonSchema(SCHEMA, spelling="any")
    engine, generic = js.coerce(llm, f=b"".join, engine=True), js.coerce(llm, f=b"".join, engine=False)
    doc = b'{"id":12,"tag":"red","note":"ab"}'
    toks = split(pieces, doc, list(range(0, len(doc), 3)))
    for k in range(len(toks) + 1):
        a = (await engine.logw_next(toks[:k])).weights
        b = (await generic.logw_next(toks[:k])).weights
        assert np.all(a <= b)  # the engine's language is a subset
        assert a[-1] == b[-1]


async def test_json_differences_by_design(llm, pieces):
    js = JsonSchema(SCHEMA, spelling="any")
    engine = js.coerce(llm, f=b"".join, engine=True)
    for doc in [b'{"tag":"red","id":1}', b'{"id":1,"note":"\\/"}', b'{"id":-0}']:
        toks = split(pieces, doc, list(range(len(doc))))
        assert await js.complete(list(doc)) == 0.0
        assert await engine.complete(toks) == NEG_INF
    one = JsonSchema({"enum": [1.0]}, spelling="any")
    e1 = one.coerce(llm, f=b"".join, engine=True)
    assert await one.complete(list(b"1")) == 0.0 and await e1.complete([pieces[b"1"]]) == 0.0
    assert await one.complete(list(b"1.0")) == 0.0
    assert await e1.complete(split(pieces, b"1.0", [1, 2])) == NEG_INF


# The potential contract ----------------------------------------------------------


async def test_contract_checks(llm):
    from genlm.control import testing

    c = llm.constrain(regex=r"[a-z ]{1,12}\.")
    contexts = [[], llm.tokenize("hello"), llm.tokenize("hello world")]
    await testing.check_potential(c, contexts)
    await c.assert_batch_consistency(contexts + contexts[:1])


_COERCED: dict = {}  # pattern → its engine constraint, compiled once


@pytest.mark.parametrize("pattern", PATTERNS[:4])
@HYP
@given(text=REGEX_TEXT, cuts=st.lists(st.integers(0, 40), max_size=6), seed=st.integers(0, 2**16))
async def test_allowed_next_agrees_with_prefix_and_complete(llm, pieces, pattern, text, cuts, seed):
    """At every prefix of a context (dead ones included): a few rows (checked on the
    matcher) and every row (checked on the mask) answer as `prefix(ctx + [x])` and,
    for EOS, `complete(ctx)` do."""
    if pattern not in _COERCED:
        _COERCED[pattern] = BoolFSA.from_regex(pattern).coerce(llm, f=b"".join)
    c = _COERCED[pattern]
    rng = np.random.default_rng(seed)
    eos = len(c.vocab)
    context = split(pieces, text.encode(), cuts)
    for k in range(len(context) + 1):
        ctx = context[:k]
        few = [int(i) for i in rng.choice(eos, size=5, replace=False)] + [eos]
        want = [await c.prefix(ctx + [c.vocab[i]]) > NEG_INF for i in few[:-1]]
        want.append(await c.complete(ctx) > NEG_INF)
        assert list(await c.allowed_next(ctx, few)) == want, ctx
        every = np.asarray(await c.allowed_next(ctx, np.arange(eos + 1)), dtype=bool)
        assert every[few].tolist() == want, ctx
        if await c.prefix(ctx) == 0.0:
            assert np.array_equal(every, (await c.logw_next(ctx)).weights == 0.0), ctx
        else:
            assert not every.any()


async def test_awrs_checks_draws_with_allowed_next(llm):
    from genlm.control import AWRS

    c = llm.constrain(regex=r"[a-z ]{1,20}\.")
    calls = {"prefix": 0}
    prefix = c.prefix

    async def counted(ctx):
        calls["prefix"] += 1
        return await prefix(ctx)

    c.prefix = counted
    sampler = AWRS(llm, c, seed=0)
    ctx = []
    for _ in range(4):
        token, logw, _ = await sampler.sample(ctx)
        assert logw > NEG_INF
        if token is EOS:  # AWRS reads the engine's rows: EOS comes once the text matches
            assert await c.complete(ctx) == 0.0
            break
        ctx.append(token)
    assert calls["prefix"] == 0
    assert await c.prefix(ctx) == 0.0


async def test_eos_entry_is_complete(llm, pieces):
    c = llm.constrain(regex="ab|abc")
    toks = [pieces[b"a"], pieces[b"b"]]
    row = await c.logw_next(toks)
    assert row[EOS] == 0.0 == await c.complete(toks)
    assert row[pieces[b"c"]] == 0.0 and row[pieces[b"d"]] == NEG_INF
    assert (await c.logw_next([pieces[b"a"]]))[EOS] == NEG_INF


async def test_dead_context_raises_and_batches_dedupe(llm, pieces):
    c = llm.constrain(regex="a+")
    with pytest.raises(ValueError, match="weight zero"):
        await c.logw_next([pieces[b"b"]])
    a = [pieces[b"a"]]
    rows = await c.batch_logw_next([a, [], a])
    assert np.array_equal(rows[0].weights, rows[2].weights)
    assert await c.prefix([pieces[b"b"], pieces[b"a"]]) == NEG_INF


async def test_cache_is_bounded_and_spawn_is_independent(llm, pieces):
    c = llm.constrain(regex="[a-z]*", cache_size=8)
    letters = [pieces[bytes([b])] for b in b"abcdefghij"]
    for i in range(len(letters)):
        for j in range(len(letters)):
            assert await c.prefix([letters[i], letters[j]]) == 0.0
    assert len(c._cache) <= 8
    s = c.spawn()
    assert len(s._cache) == 0 and s.grammar == c.grammar
    assert await s.complete(letters[:3]) == 0.0


async def test_spawn_shares_the_compiled_grammar_not_its_states(llm, pieces):
    # a spawned copy starts from a copy of the compiled root (no second compile, the
    # engine's lexer states shared); its rows are a fresh constraint's, also when the
    # two are stepped at once on threads, and clear_cache compiles the grammar again
    import concurrent.futures

    c = llm.constrain(regex="(ab|b)*a?")
    a, b = pieces[b"a"], pieces[b"b"]
    contexts = [[a, b] * k + [a] * (k % 2) for k in range(12)]
    fresh = llm.constrain(regex="(ab|b)*a?")
    want = [np.asarray((await fresh.logw_next(ctx)).weights) for ctx in contexts]
    for ctx in contexts:  # the original walks ahead, building lexer states
        await c.logw_next(ctx)
    s = c.spawn()
    assert s._root is c._root and s._cache.root is not c._cache.root and len(s._cache) == 0

    def rows(p):
        return [p.rows([ctx])[0] for ctx in reversed(contexts)][::-1]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(rows, [s, c.spawn()]))
    for one in got:
        assert all(np.array_equal(x, y) for x, y in zip(one, want))
    root = c._root
    c.clear_cache()
    assert c._root is not root and len(c._cache) == 0
    assert np.array_equal((await c.logw_next(contexts[3])).weights, want[3])


async def test_pickles_and_rebuilds_the_engine(llm, pieces):
    import pickle

    c = llm.constrain(regex="ab+")
    await c.prefix([pieces[b"a"]])
    d = pickle.loads(pickle.dumps(c))
    assert d.grammar == c.grammar and len(d._cache) == 0
    ctx = [pieces[b"a"], pieces[b"b"]]
    assert await d.complete(ctx) == 0.0
    assert np.array_equal((await d.logw_next(ctx)).weights, (await c.logw_next(ctx)).weights)


async def test_product_with_the_llm_and_smc(llm):
    from genlm.control import AWRS, direct_token_sampler

    llm2 = llm.spawn(prompt_ids=llm.model.tokenizer.encode("Numbers:"))
    c = llm2.constrain(regex=r" ?[0-9]{1,3}")
    assert (llm2 * c).vocab_eos is llm2.vocab_eos
    for sampler in (direct_token_sampler(llm2 * c), AWRS(llm2, c)):
        seqs = await sampler.smc(n_particles=3, ess_threshold=0.5, max_tokens=6)
        for ctx, w in zip(seqs.contexts, seqs.log_weights):
            if w > NEG_INF:
                assert await c.complete(ctx[:-1]) == 0.0
    seqs = await direct_token_sampler(llm2).smc(3, 0.5, 4, critic=c)
    assert len(seqs.contexts) == 3


# Bad input ---------------------------------------------------------------------


def test_engine_errors_are_value_errors(llm):
    with pytest.raises(ValueError, match="invalid regex 'a\\('"):
        GuidedConstraint.from_regex(llm, "a(")
    with pytest.raises(ValueError, match="unknown name"):
        llm.constrain(lark="start: foo")
    with pytest.raises(ValueError, match="Invalid type"):
        llm.constrain(json_schema={"type": "foo"})
    with pytest.raises(ValueError, match="Unimplemented"):
        llm.constrain(json_schema={"not": {"type": "string"}})
    with pytest.raises(ValueError, match="invalid JSON schema"):
        llm.constrain(json_schema="{not json")


def test_argument_errors(llm):
    with pytest.raises(ValueError, match="exactly one"):
        llm.constrain()
    with pytest.raises(ValueError, match="exactly one"):
        llm.constrain(regex="a", lark="start: /a/")
    with pytest.raises(TypeError, match="PromptedLLM"):
        GuidedConstraint.from_regex([b"a"], "a")
    with pytest.raises(TypeError, match="must be a str"):
        GuidedConstraint.from_regex(llm, 3)
    with pytest.raises(ValueError, match="unknown grammar kind"):
        GuidedConstraint(llm, "ebnf", "x")
    with pytest.raises(ValueError, match="from_lark"):
        BoolCFG.from_string("1: S -> a").coerce(llm, f=b"".join, engine=True)


async def test_constrain_json_takes_the_spelling(llm, pieces):
    """`llm.constrain(json_schema=..., spelling=...)`: "canonical" and "compact" refuse
    whitespace and "any" (the default, as `JsonSchema`'s) allows it; canonical refuses `\\u0061`; the
    schema's own x-guidance options win; a spelling beside a regex is an error."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    spaced, tight, escaped = b'{"a": "x"}', b'{"a":"x"}', b'{"a":"\\u0061"}'

    async def accepts(c, doc):
        return await c.complete(split(pieces, doc, list(range(len(doc))))) == 0.0

    default, compact, free = (llm.constrain(json_schema=schema, spelling="canonical"),
                              llm.constrain(json_schema=schema, spelling="compact"),
                              llm.constrain(json_schema=schema))
    assert [await accepts(default, d) for d in (spaced, tight, escaped)] == [False, True, False]
    assert [await accepts(compact, d) for d in (spaced, tight, escaped)] == [False, True, True]
    assert [await accepts(free, d) for d in (spaced, tight, escaped)] == [True, True, True]
    own = llm.constrain(json_schema={**schema, "x-guidance": {"whitespace_flexible": True}})
    assert own.source["x-guidance"]["whitespace_flexible"] is True
    with pytest.raises(ValueError, match="spelling= applies to json_schema= only"):
        llm.constrain(regex="a", spelling="any")
    with pytest.raises(ValueError, match="unknown JSON spelling"):
        llm.constrain(json_schema=schema, spelling="loose")
