import math

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toys.constraints import embedded_vocab

from genlm.control import EOS, WCFG, BoolCFG
from genlm.control.testing import check_potential

NEG_INF = float("-inf")

ARITH = r"""
start: "(" start ")" | NUMBER | start "+" start
NUMBER: /[0-9]+/
%ignore " "
"""
LISTS = r"""
start: item ("," item)*
item: WORD | "[" start "]"
WORD: /[a-c]+/
"""
CASES = {
    "arith": (ARITH, "()+1 2x", b")1"),
    "lists": (LISTS, "abc,[]d", b"]a"),
}

_CACHE: dict = {}


def setup(name):
    if name not in _CACHE:
        text, _, _ = CASES[name]
        _CACHE[name] = (
            BoolCFG.from_lark(text),
            lark.Lark(text, parser="earley", lexer="dynamic_complete"),
        )
    return _CACHE[name]


def lark_accepts(parser, text):
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


async def completion(cfg, ctx, prefer, limit=12):
    """A completion of `ctx` found by the potential itself, preferring bytes in `prefer`."""
    ctx = list(ctx)
    for _ in range(limit):
        row = await cfg.logw_next(ctx)
        if row[EOS] == 0.0:
            return bytes(ctx)
        nxt = next((b for b in prefer if row[b] == 0.0), None)
        if nxt is None:
            nxt = next(b for b in range(256) if row[b] == 0.0)
        ctx.append(nxt)
    return None


@pytest.mark.parametrize("name", list(CASES))
@settings(max_examples=80, deadline=None)
@given(data=st.data())
async def test_bool_cfg_agrees_with_lark(name, data):
    cfg, parser = setup(name)
    _, alphabet, prefer = CASES[name]
    text = data.draw(st.text(alphabet=alphabet, max_size=8))
    ctx = list(text.encode())
    want = 0.0 if lark_accepts(parser, text) else NEG_INF
    assert await cfg.complete(ctx) == want
    viable = await cfg.prefix(ctx) == 0.0
    if want == 0.0:
        assert viable
        for k in range(len(ctx)):
            assert await cfg.prefix(ctx[:k]) == 0.0
    if viable:
        # The claim "ctx is a viable prefix" is checked by Lark on a witness.
        witness = await completion(cfg, ctx, prefer)
        assert witness is not None and witness.startswith(bytes(ctx))
        assert lark_accepts(parser, witness.decode())


@pytest.mark.parametrize("name", list(CASES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
async def test_every_prefix_of_a_lark_sentence_is_viable(name, data):
    cfg, parser = setup(name)
    # Sentences built from the grammar's own pieces, so most parse.
    pieces = {"arith": ["(", ")", "1", "23", "+", " "], "lists": ["a", "bc", ",", "[", "]"]}[name]
    text = "".join(data.draw(st.lists(st.sampled_from(pieces), max_size=8)))
    if lark_accepts(parser, text):
        ctx = list(text.encode())
        assert await cfg.complete(ctx) == 0.0
        for k in range(len(ctx) + 1):
            assert await cfg.prefix(ctx[:k]) == 0.0


async def test_weighted_grammar_by_hand():
    # S -> a S b (1/2) | c (1/2): G(a^n c b^n) = 2^-(n+1); prefix("a") = 1/2.
    g = WCFG.from_string("0.5: S -> a S b\n0.5: S -> c\n")
    assert await g.complete(list(b"acb")) == pytest.approx(math.log(0.25))
    assert await g.complete(list(b"aacbb")) == pytest.approx(math.log(0.125))
    assert await g.prefix(list(b"a")) == pytest.approx(math.log(0.5))
    assert await g.prefix(list(b"aa")) == pytest.approx(math.log(0.25))
    assert await g.complete(list(b"ac")) == NEG_INF
    row = await g.logw_next(list(b"ac"))
    assert row[ord("b")] == pytest.approx(0.0)
    assert row[EOS] == NEG_INF
    await check_potential(g, [[], list(b"a"), list(b"ac"), list(b"aacb")])


async def test_multibyte_string_terminals():
    g = BoolCFG.from_string("1: S -> héllo\n1: S -> S x\n")
    assert await g.complete(list("héllo".encode())) == 0.0
    assert await g.complete(list("hélloxx".encode())) == 0.0
    assert await g.prefix(list("hé".encode())[:2]) == 0.0
    assert await g.complete(list(b"hello")) == NEG_INF


@pytest.mark.parametrize("name", list(CASES))
async def test_check_potential(name):
    cfg, _ = setup(name)
    ctxs = {"arith": [b"", b"(1", b"(1 +", b"x"], "lists": [b"", b"a,[b", b"a,", b"d"]}[name]
    await check_potential(cfg, [list(c) for c in ctxs])
    w = WCFG.from_lark(CASES[name][0])
    await check_potential(w, [list(c) for c in ctxs])


async def test_small_cache_gives_the_same_answers():
    small = BoolCFG.from_lark(ARITH, cache_size=1)
    big, _ = setup("arith")
    for s in [b"((1)+2)", b"((1", b"(1)+(", b"1))"]:
        assert await small.prefix(list(s)) == await big.prefix(list(s))
        assert await small.complete(list(s)) == await big.complete(list(s))
    assert len(small._cache) <= 1


async def test_coerced_onto_the_embedded_vocabulary():
    vocab = embedded_vocab()
    cfg, parser = setup("arith")
    coerced = cfg.coerce(vocab, f=b"".join)
    by_bytes = {bytes(t): t for t in vocab}
    ctx = [by_bytes[b"("]] if b"(" in by_bytes else []
    await check_potential(coerced, [[], ctx], top=40)
    row = await coerced.logw_next(ctx)
    for tok in vocab[::41]:
        assert row[tok] == await cfg.prefix(list(b"".join(ctx + [tok])))


async def test_coercion_keeps_the_tokens_spelled_in_the_grammars_bytes():
    """`prune=True` drops the tokens with a byte outside the grammar's terminals
    (`alphabet`): they have weight zero, so on every token both coercions agree."""
    vocab = embedded_vocab()
    cfg, _ = setup("arith")
    pruned = cfg.coerce(vocab, f=b"".join)
    full = cfg.coerce(vocab, f=b"".join, prune=False)
    assert set(pruned.vocab) == {t for t in vocab if set(bytes(t)) <= cfg.alphabet}
    assert 0 < len(pruned.vocab) < len(vocab) == len(full.vocab)
    by_bytes = {bytes(t): t for t in vocab}
    for ctx in ([], [by_bytes[b"("]] if b"(" in by_bytes else []):
        kept, every = await pruned.logw_next(ctx), await full.logw_next(ctx)
        assert kept[EOS] == every[EOS]
        for tok in vocab:
            assert (kept[tok] if tok in pruned.tables.lookup else -math.inf) == every[tok], tok


@pytest.mark.parametrize(
    "text,words",
    [
        ("start: (", ["invalid Lark grammar"]),
        ('foo: "a"', ["start"]),
        ("start: bar", ["invalid Lark grammar"]),
        ('start: A\nA: /a(?=b)/', ["terminal A", "lookahead"]),
    ],
)
def test_bad_lark_grammar(text, words):
    with pytest.raises(ValueError) as info:
        BoolCFG.from_lark(text)
    for w in words:
        assert w in str(info.value)


def test_bad_grammar_string():
    with pytest.raises(ValueError, match="invalid grammar"):
        BoolCFG.from_string("S -> a b\n")
    with pytest.raises(ValueError, match="start symbol"):
        BoolCFG.from_string("1: T -> a\n")
    with pytest.raises(TypeError):
        BoolCFG.from_string(3)


async def test_non_byte_tokens_are_a_type_error():
    cfg, _ = setup("arith")
    with pytest.raises(TypeError, match="byte value"):
        await cfg.prefix(["("])
    with pytest.raises(ValueError, match="weight zero"):
        await cfg.logw_next(list(b")"))


# Imports, empty languages and the Earley limit ---------------------------------


async def test_relative_import_reads_the_grammar_folder_only(tmp_path, monkeypatch):
    (tmp_path / "words.lark").write_text('WORD: /[a-c]+/\nCOMMA: ","\n')
    grammar = "%import .words (WORD, COMMA)\nstart: WORD (COMMA WORD)*"
    cfg = BoolCFG.from_lark(grammar, base_dir=tmp_path)
    assert await cfg.complete(list(b"ab,c")) == 0.0
    assert await cfg.complete(list(b"ab,")) == NEG_INF
    monkeypatch.chdir(tmp_path)  # the working directory is never searched
    with pytest.raises(ValueError, match="relative import needs"):
        BoolCFG.from_lark(grammar)


async def test_bundled_imports_keep_working():
    cfg = BoolCFG.from_lark("%import common.WORD\n%import common.WS\nstart: WORD (WS WORD)*")
    assert await cfg.complete(list(b"ab cd")) == 0.0
    assert await cfg.complete(list(b"ab1")) == NEG_INF


def test_languages_that_are_empty_are_refused_and_unused_loops_are_not():
    with pytest.raises(ValueError, match="language is empty"):
        BoolCFG.from_lark('start: a\na: a "x"')
    BoolCFG.from_lark('start: "y" | a\na: a "x"')  # `a` is empty, `start` is not


async def test_earley_is_built_on_first_use_within_its_rule_limit():
    grammar = "start: " + " | ".join(f'"kw{i}"' for i in range(40))
    cfg = BoolCFG.from_lark(grammar, max_rules=10)
    assert cfg._model is None
    with pytest.raises(ValueError, match="max_rules=10"):
        await cfg.prefix([])
    cfg = BoolCFG.from_lark(grammar)
    assert await cfg.complete(list(b"kw39")) == 0.0
    assert await cfg.complete(list(b"kw40")) == NEG_INF


async def test_literal_terminals_are_single_rules_with_the_same_weights():
    """A literal terminal is one rule `T → b₁…b_n` (weight 1, as its chain automaton
    gives), so weighted sentences keep their weights: two rules for `start`, 1/2 each."""
    w = WCFG.from_lark('start: "ab" | X\nX: /c|d/')
    assert await w.complete(list(b"ab")) == pytest.approx(math.log(0.5))
    assert await w.complete(list(b"c")) == pytest.approx(math.log(0.5 * 1 / 2))


# A grammar over characters (0.4.1's WCFG(cfg)) --------------------------------

CHAR_GRAMMAR = """
1.0: S -> A
0.5: A -> a A
0.25: A -> b
0.25: A -> é
"""


@pytest.mark.parametrize("text", ["", "a", "aab", "aé", "ab", "aaé", "ba"])
async def test_a_character_grammar_reads_characters_as_their_bytes(text):
    from genlm.grammar import CFG, Float

    grammar = CFG.from_string(CHAR_GRAMMAR, Float)
    cfg = WCFG(grammar)
    assert cfg.cfg is grammar and cfg.characters
    want_complete = math.log(grammar(text)) if grammar(text) > 0 else NEG_INF
    prefix = grammar.prefix_grammar(text)
    want_prefix = math.log(prefix) if prefix > 0 else NEG_INF
    assert await cfg.complete(list(text)) == pytest.approx(want_complete)
    assert await cfg.prefix(list(text)) == pytest.approx(want_prefix)
    # the same weights on the text's bytes, and through the carried states
    assert await cfg.complete(list(text.encode())) == pytest.approx(want_complete)
    state = cfg.state_of([])
    for ch in text:
        state = cfg.advance(state, ch)
    if want_prefix == NEG_INF:
        assert state is None and cfg.state_of(list(text.encode())) is None
    else:
        by_bytes = cfg.logw_next_of(cfg.state_of(list(text.encode())))
        assert cfg.logw_next_of(state).tolist() == by_bytes.tolist()
    eos_prefix = cfg.cfg_eos.prefix_grammar(text)
    assert eos_prefix == pytest.approx(prefix)


async def test_from_string_is_a_byte_grammar_that_refuses_characters():
    cfg = WCFG.from_string(CHAR_GRAMMAR)
    assert not cfg.characters and all(isinstance(v, bytes) for v in cfg.cfg.V)
    with pytest.raises(TypeError, match="byte value"):
        await cfg.prefix(["a"])
