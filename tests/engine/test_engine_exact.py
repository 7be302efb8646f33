"""The default coercion (`engine=None`) never changes the language: on every regex and
Lark grammar used in examples/, docs/, benchmarks/ and README.md, and on grammars
built to trip a lexer, the engine is taken only where it agrees with the byte-level
potential, and where taken it agrees at every prefix (Hypothesis texts, and paths
sampled from the constraint itself)."""

import ast
import itertools
import os
import pathlib
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("llguidance")

from genlm.control import BoolCFG, BoolFSA  # noqa: E402
from genlm.control.constraints.cfg import read_lark  # noqa: E402
from genlm.control.engine._lark_exact import engine_lark  # noqa: E402
from genlm.control.engine.guided import GuidedCoerced  # noqa: E402
from genlm.control.weights import NEG_INF  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
HYP = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _python_constants() -> tuple[set, set]:
    """Regexes (arguments of `from_regex`/`regex=`, constants named *REGEX*/DATE_LIST)
    and Lark grammars (constants named *GRAMMAR*/*LARK*) in examples/ and benchmarks/."""
    regexes, grammars = set(), set()
    for path in [*ROOT.glob("examples/*.py"), *ROOT.glob("benchmarks/*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                value = node.value.value
                for target in node.targets:
                    name = getattr(target, "id", "")
                    if isinstance(value, str) and ("REGEX" in name or name == "DATE_LIST"):
                        regexes.add(value)
                    if isinstance(value, str) and ("GRAMMAR" in name or "LARK" in name):
                        grammars.add(value)
            if isinstance(node, ast.Call):
                func = getattr(node.func, "attr", getattr(node.func, "id", ""))
                args = [a for a in node.args if isinstance(a, ast.Constant)]
                if func == "from_regex" and args and isinstance(args[0].value, str):
                    regexes.add(args[0].value)
                for kw in node.keywords:
                    if kw.arg == "regex" and isinstance(kw.value, ast.Constant):
                        regexes.add(kw.value.value)
    return regexes, grammars


def _markdown_regexes() -> set:
    found = set()
    for path in [*ROOT.glob("docs/*.md"), ROOT / "README.md"]:
        text = path.read_text()
        found |= set(re.findall(r'(?:from_regex\(|regex=)r"([^"]+)"', text))
    return found


PY_REGEXES, PY_GRAMMARS = _python_constants()
REGEXES = sorted(
    PY_REGEXES
    | _markdown_regexes()
    | {r"(?i)select [a-z]+", r"(?s)<.{0,3}>", r"[éü€]+ \w{2}", r"(ab|a)(bc|c)*\.", r"\d+(\.\d*)?"}
)
# Grammars built to trip a lexer, with whether the engine is exact for them.
# A grammar the lexer would split differently is exact once its clashing terminals
# are lowered to one-byte rules; only terminals over non-ASCII bytes are not lowered.
TRICKY = {
    "greedy-repeat": ("start: A A\nA: /a+/", True),
    "word-word": ("start: WORD WORD\nWORD: /[a-z]+/", True),
    "int-or-float": ('start: INT "." INT | FLOAT\nINT: /[0-9]+/\nFLOAT: /[0-9]+\\.[0-9]+/', True),
    "greedy-utf8": ("start: A A\nA: /é+/", False),
    "word-word-ignore": ("start: WORD WORD\nWORD: /[a-z]+/\n%ignore \" \"", True),
    "optional-chain": ('start: "[" A? B? C? D? "]"\nA: /a+/\nB: /[ab]+/\nC: "c"\nD: /[cd]/', True),
    "keyword-name": (
        'start: "let" NAME "=" NUMBER\nNAME: /[a-z]+/\nNUMBER: /[0-9]+/\n%ignore " "',
        True,
    ),
    "keyword-or-name": ('start: ("if" | NAME) "?"\nNAME: /[a-z]+/', True),
    "priorities": ("start: A | B\nA.2: /ab/\nB: /a+b/", True),
    "ignore-list": (
        'start: "[" [NUMBER ("," NUMBER)*] "]"\nNUMBER: /-?[0-9]+/\n%ignore /[ \\t]+/',
        True,
    ),
    "common": ("%import common.WORD\n%import common.WS\nstart: WORD (WS WORD)*", True),
    "dotted": ('start: NUM "." NUM\nNUM: /[0-9]+/', True),
    "case-insensitive": ('start: "select"i " " NAME\nNAME: /[a-z]+/', True),
    "arith": (
        'start: expr\nexpr: term (("+" | "-") term)*\nterm: NUMBER | "(" expr ")"\nNUMBER: /\\d+/',
        True,
    ),
}
LARK_FILES = {p.stem: (p.read_text(), True) for p in sorted(ROOT.glob("benchmarks/grammars/*.lark"))}
GRAMMARS = {f"corpus-{i}": (g, True) for i, g in enumerate(sorted(PY_GRAMMARS))} | LARK_FILES | TRICKY


def test_the_corpus_is_found():
    assert r" [0-9]+\." in REGEXES and r"[0-9]{3}-[0-9]{4}" in REGEXES
    assert len(PY_GRAMMARS) >= 3  # benchmarks' and the SQL example's grammars


def tokens(pieces, data: bytes, cuts) -> list:
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    out = []
    for a, b in zip(bounds, bounds[1:]):
        part = data[a:b]
        out.extend([pieces[part]] if part in pieces else [pieces[bytes([x])] for x in part])
    return out


# Regexes -----------------------------------------------------------------------

_REGEX_CACHE: dict = {}


def regex_pair(llm, pattern):
    if pattern not in _REGEX_CACHE:
        fsa = BoolFSA.from_regex(pattern)
        _REGEX_CACHE[pattern] = (
            fsa.coerce(llm, f=b"".join),
            fsa.coerce(llm, f=b"".join, engine=False),
        )
    return _REGEX_CACHE[pattern]


@pytest.mark.parametrize("pattern", REGEXES)
@HYP
@given(data=st.data(), cuts=st.lists(st.integers(0, 60), max_size=6))
async def test_regex_engine_agrees_row_by_row(llm, pieces, pattern, data, cuts):
    engine, generic = regex_pair(llm, pattern)
    assert isinstance(engine, GuidedCoerced) and not isinstance(generic, GuidedCoerced)
    text = data.draw(
        st.from_regex(re.compile(pattern, re.ASCII), fullmatch=True).filter(lambda s: len(s) < 40)
        | st.text(alphabet=st.sampled_from("aA1 .-<>{}\néü€\t_x"), max_size=10)
    )
    cut = data.draw(st.integers(0, len(text)))
    ctx = tokens(pieces, text[:cut].encode(), cuts)
    for k in range(len(ctx) + 1):
        p = await generic.prefix(ctx[:k])
        assert await engine.prefix(ctx[:k]) == p
        assert await engine.complete(ctx[:k]) == await generic.complete(ctx[:k])
        if p == NEG_INF:
            return
    a, b = await engine.logw_next(ctx), await generic.logw_next(ctx)
    assert np.array_equal(a.weights, b.weights)


# Lark --------------------------------------------------------------------------


def alphabet(grammar: str) -> str:
    chars = {c for c in grammar if c.isprintable()} - set("/|()*+?[]\\:\n%")
    return "".join(sorted(chars | {" ", "1"}))


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_lark_engine_decision(llm, name):
    grammar, exact = GRAMMARS[name]
    decision = engine_lark(read_lark(grammar))
    assert (decision.inexact is None) == exact, decision.inexact
    taken = isinstance(BoolCFG.from_lark(grammar).coerce(llm, f=b"".join), GuidedCoerced)
    assert taken == exact


_LARK_CACHE: dict = {}


def lark_pair(llm, grammar):
    if grammar not in _LARK_CACHE:
        cfg = BoolCFG.from_lark(grammar)
        _LARK_CACHE[grammar] = (cfg.coerce(llm, f=b"".join), cfg)  # the default coercion
    return _LARK_CACHE[grammar]


@pytest.mark.parametrize("name", sorted(n for n, (_, exact) in GRAMMARS.items() if exact))
@HYP
@given(data=st.data(), cuts=st.lists(st.integers(0, 60), max_size=6))
async def test_lark_engine_agrees_with_earley_where_taken(llm, pieces, name, data, cuts):
    grammar, _ = GRAMMARS[name]
    engine, cfg = lark_pair(llm, grammar)
    assert isinstance(engine, GuidedCoerced)
    text = data.draw(st.text(alphabet=alphabet(grammar), max_size=14))
    toks = tokens(pieces, text.encode(), cuts)
    for k in range(len(toks) + 1):
        raw = list(b"".join(toks[:k]))
        p = await cfg.prefix(raw)
        assert await engine.prefix(toks[:k]) == p, (name, raw)
        assert await engine.complete(toks[:k]) == await cfg.complete(raw), (name, raw)
        if p == NEG_INF:
            return


@pytest.mark.parametrize("name", sorted(n for n, (_, exact) in GRAMMARS.items() if exact))
async def test_lark_engine_agrees_along_sampled_sentences(llm, name):
    """Byte paths drawn from Earley's own next-byte rows (every step alive): the
    engine accepts every prefix and completes exactly where Earley does."""
    grammar, _ = GRAMMARS[name]
    engine, cfg = lark_pair(llm, grammar)
    rng = np.random.default_rng(0)
    single = {bytes(t): t for t in llm.vocab if len(bytes(t)) == 1}
    for _ in range(4):
        raw: list = []
        for _ in range(24):
            toks = [single[bytes([b])] for b in raw]
            assert await engine.prefix(toks) == 0.0, (name, bytes(raw))
            assert await engine.complete(toks) == await cfg.complete(raw), (name, bytes(raw))
            row = (await cfg.logw_next(raw)).weights
            live = [b for b in np.flatnonzero(row[:-1] == 0) if bytes([b]) in single]
            if len(raw) % 4 == 0:  # the default's row against Earley on sampled tokens
                mask = (await engine.logw_next(toks)).weights
                allowed = np.flatnonzero(mask[:-1] == 0.0)
                picks = [*rng.choice(len(llm.vocab), size=24, replace=False)]
                picks += [*rng.choice(allowed, size=min(24, len(allowed)), replace=False)]
                for i in picks:
                    ok = await cfg.prefix(raw + list(bytes(llm.vocab[i]))) == 0.0
                    assert (mask[i] == 0.0) == ok, (name, bytes(raw), bytes(llm.vocab[i]))
            if not live or rng.random() < 0.05:
                break
            raw.append(int(rng.choice(live)))


async def test_lowering_serves_texts_the_engines_own_lexer_refuses(llm, pieces):
    """The witnesses behind lowering: texts in the grammar that the engine's lexer
    rejects on the grammar as written (maximal munch), which the default coercion
    (clashing terminals lowered to one-byte rules) accepts, as Earley does."""
    from genlm.control import GuidedConstraint

    for name, text in [("greedy-repeat", b"aa"), ("word-word", b"ab"), ("word-word-ignore", b"ab")]:
        grammar, _ = GRAMMARS[name]
        raw = GuidedConstraint.from_lark(llm, grammar)
        default = BoolCFG.from_lark(grammar).coerce(llm, f=b"".join)
        assert isinstance(default, GuidedCoerced)
        toks = tokens(pieces, text, range(len(text)))
        assert await BoolCFG.from_lark(grammar).complete(list(text)) == 0.0
        assert await default.complete(toks) == 0.0, (name, text)
        assert await raw.complete(toks) == NEG_INF, (name, text)


async def test_non_ascii_clashes_keep_the_generic_path(llm, pieces):
    """`A: /é+/` cannot be lowered (a byte of `é` is not a character to the engine):
    the default keeps Earley, and the engine's lexer does refuse `éé` split as `A A`."""
    grammar, _ = GRAMMARS["greedy-utf8"]
    cfg = BoolCFG.from_lark(grammar)
    assert not isinstance(cfg.coerce(llm, f=b"".join), GuidedCoerced)
    engine = cfg.coerce(llm, f=b"".join, engine=True)
    text = "éé".encode()
    assert await cfg.complete(list(text)) == 0.0
    assert await engine.complete(tokens(pieces, text, range(len(text)))) == NEG_INF


# Random grammars ---------------------------------------------------------------

POOL = ['"a"', '"ab"', '"b"', '"ba"', "/a+/", "/b+/", "/[ab]/", "/ab?/", "/a|bb/", '"aa"']
SHORT = [bytes(s) for n in range(5) for s in itertools.product(b"ab ", repeat=n)]


def random_grammar(rng) -> str:
    k = rng.randint(1, 4)
    names = [f"T{i}" for i in range(k)]
    defs = "\n".join(f"{n}: {t}" for n, t in zip(names, rng.sample(POOL, k)))

    def seq():
        return " ".join(rng.choice(names + ["x"]) for _ in range(rng.randint(1, 3)))

    rules = f"start: {seq()} | {seq()}\nx: {seq().replace('x', names[0])} | {rng.choice(names)} x\n"
    return rules + defs + "\n" + ('%ignore " "\n' if rng.random() < 0.4 else "")


@pytest.mark.parametrize("seed", range(2))
async def test_random_grammars_agree_wherever_the_engine_is_taken(llm, seed):
    """Small random grammars over overlapping terminals: wherever the rule admits the
    engine, it agrees with Earley on every string over {a, b, space} up to length 4."""
    rng = __import__("random").Random(seed)
    single = {bytes(t): t for t in llm.vocab if len(bytes(t)) == 1}
    taken = 0
    for _ in range(12):
        cfg = BoolCFG.from_lark(random_grammar(rng))
        engine = cfg.coerce(llm, f=b"".join)
        if not isinstance(engine, GuidedCoerced):
            continue
        taken += 1
        for s in SHORT:
            toks = [single[bytes([b])] for b in s]
            assert await engine.prefix(toks) == await cfg.prefix(list(s)), s
            assert await engine.complete(toks) == await cfg.complete(list(s)), s
    assert taken >= 3


def test_lowering_stops_at_its_budget_with_the_reason(monkeypatch):
    """A clash whose terminals would need more automaton states lowered than the
    budget allows is not proven: the grammar keeps Earley, and the reason names the
    user's terminal and the budget."""
    from genlm.control.engine import _lark_exact

    grammar = read_lark("start: A A\nA: /[a-z]{1,30}/")
    assert engine_lark(grammar).inexact is None
    monkeypatch.setattr(_lark_exact, "MAX_LOWERED_STATES", 10)
    reason = engine_lark(grammar).inexact
    assert reason is not None and "terminal 'A' is over the lowering budget" in reason


def test_factoring_keeps_every_rules_language():
    """`factor` writes a head's alternatives as their minimal automaton: on random
    alternative sets (and a head name its new states must not take), each head
    derives exactly its old sequences."""
    from genlm.control.engine._lark_lower import factor

    rng = __import__("random").Random(0)
    for _ in range(200):
        bodies = {tuple(rng.choice("abc") for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 7))}
        rules = [("x", b) for b in sorted(bodies)] + [("x_f1", ("z",))]
        heads: dict = {}
        for h, body in factor(rules):
            heads.setdefault(h, []).append(body)

        assert _derive(heads, "x") == bodies and _derive(heads, "x_f1") == {("z",)}


def _derive(heads: dict, sym: str) -> set:
    """The symbol sequences an acyclic grammar derives from `sym`."""
    if sym not in heads:
        return {(sym,)}
    out = set()
    for body in heads[sym]:
        parts = {()}
        for y in body:
            parts = {p + q for p in parts for q in _derive(heads, y)}
        out |= parts
    return out
