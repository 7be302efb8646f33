"""The token budget on the compiled-engine path (`GuidedCoerced`) for grammars and
schemas, and the sharper divisors of the grammar and JSON bounds.

The engine coercion reads the bound of its generic twin (the constraint's own
`generic_coercion` onto the same vocabulary). Toys: the embedded model's vocabulary
with a bigram LM that gives mass to a handful of its tokens only (`sparse_lm`), so
`enumerate_target` and `sampler_target` run every path; and the generic toys of
`test_budget_grammars.py` with long tokens added that no document can hold.
"""

from __future__ import annotations

import asyncio
import math
import os

import numpy as np
import pytest
from toys import BigramLM
from toys.core import budget_keeps_target, counting_calls

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("llguidance")

from genlm.control import AWRS, BoolCFG, JsonSchema, direct_token_sampler  # noqa: E402
from genlm.control.constraints.cfg._cfg_budget import byte_classes  # noqa: E402
from genlm.control.constraints.json_schema._json_budget import (  # noqa: E402
    mandated_bytes,
    mandated_weight,
)
from genlm.control.engine.guided import GuidedCoerced  # noqa: E402
from genlm.control.horizon import using_horizon  # noqa: E402
from genlm.control.potential import fast_paths  # noqa: E402
from genlm.control.testing import enumerate_target  # noqa: E402

LARK = r"""
start: "[" item ("," item)* "]"
item: NUMBER | WORD
NUMBER: /[0-9]+/
WORD: /[a-z]+/
"""
LARK_PIECES = [b"[", b"]", b",", b"1", b"a", b"ab", b"12"]
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": 1}},
    "required": ["a"],
    "additionalProperties": False,
}
JSON_PIECES = [b"{", b"}", b'"', b"a", b":", b"[", b"]", b"0", b"1", b","]


def sparse_lm(llm, pieces, seed: int) -> BigramLM:
    """A bigram LM over `llm`'s vocabulary with mass on the tokens of `pieces` (and
    EOS) only: random rows from a seeded Dirichlet."""
    by_bytes = {}
    for t in llm.vocab:
        by_bytes.setdefault(bytes(t), t)
    tokens = [by_bytes[p] for p in pieces]
    index = [llm.lookup[t] for t in tokens] + [len(llm.vocab)]
    rng = np.random.default_rng(seed)
    table = {}
    for prev in [None, *tokens]:
        row = np.zeros(len(llm.vocab) + 1)
        row[index] = rng.dirichlet(np.ones(len(index)))
        table[prev] = row
    return BigramLM(llm.vocab, table, tables=llm.tables)


def engine_condition(llm, kind: str):
    c = (BoolCFG.from_lark(LARK) if kind == "lark" else JsonSchema(SCHEMA)).coerce(llm, f=b"".join)
    assert isinstance(c, GuidedCoerced), "the default path is the compiled engine"
    return c


@pytest.mark.parametrize("kind", ["lark", "json"])
def test_the_engine_path_offers_its_twins_bound(llm, kind):
    """The engine coercion declares the bound, and its counts are those of the
    generic coercion over the whole vocabulary (`generic_coercion` unpruned) on the
    same contexts: for this grammar, which is regular, the coercion of its byte
    automaton (`BoolCFG.regular_form`, exact counts, read at every step)."""
    condition = engine_condition(llm, kind)
    assert fast_paths.tokens_to_finish(condition) is not None
    assert fast_paths.tokens_to_finish(llm * condition) is not None
    source = BoolCFG.from_lark(LARK).regular_form() if kind == "lark" else JsonSchema(SCHEMA)
    generic = source.generic_coercion(llm, b"".join, False, True, None)
    by_bytes = {bytes(t): t for t in reversed(llm.vocab)}
    texts = (
        [[b"["], [b"[", b"ab", b","], [b"[", b"1"]]
        if kind == "lark"
        else [
            [b"{"],
            [b"{", b'"', b"a", b'"', b":", b"["],
            [b"{", b'"', b"a", b'"', b":", b"[", b"1"],
        ]
    )
    contexts = [[by_bytes[p] for p in text] for text in texts]

    async def row(c, context, r):
        with using_horizon(len(context) + 2 + r):  # r tokens may follow the next one
            return np.asarray(await c.batch_tokens_to_finish([context]))[0]

    for context in contexts:
        for r in (0, 1, 6):
            got, want = (
                asyncio.run(row(condition, context, r)),
                asyncio.run(row(generic, context, r)),
            )
            assert (got == want).all(), (context, r)
            assert r > 1 or (want > r).any()  # where it binds, the bound prunes


@pytest.mark.parametrize("name", ["direct", "awrs"])
@pytest.mark.parametrize("kind", ["lark", "json"])
def test_engine_pruning_leaves_the_target_unchanged(llm, kind, name):
    """Every random path of every step on the sparse toy, with the budget and
    without: the same `Z` and posterior as `enumerate_target`; the budget prunes."""
    pieces, max_lens = (LARK_PIECES, (3, 4, 5)) if kind == "lark" else (JSON_PIECES, (9, 10))
    lm = sparse_lm(llm, pieces, 1)
    condition = engine_condition(llm, kind)
    sampler = direct_token_sampler(lm * condition) if name == "direct" else AWRS(lm, condition)
    assert budget_keeps_target(sampler, lm, condition, max_lens), "the budget pruned no context"


def test_engine_budget_saves_particles_and_stays_unbiased(llm):
    """Seeded runs at ESS 0.5 on the sparse toy with the Lark grammar: fewer
    particles reach `max_tokens` unfinished with the budget than without, and the
    mean of `Ẑ/Z` over 200 runs with it is within 4σ + 0.05 of 1."""
    lm = sparse_lm(llm, LARK_PIECES, 2)
    condition = engine_condition(llm, "lark")
    sampler = direct_token_sampler(lm * condition)
    max_tokens = 5
    exact = asyncio.run(enumerate_target(lm, max_tokens, condition=condition))

    async def runs(budget_aware: bool, n: int):
        return await asyncio.gather(
            *(sampler.smc(8, 0.5, max_tokens, seed=s, budget_aware=budget_aware) for s in range(n))
        )

    def dead(rs) -> int:
        return sum(int(np.isneginf(r.log_weights).sum()) for r in rs)

    on = asyncio.run(runs(True, 200))
    assert dead(on[:16]) < dead(asyncio.run(runs(False, 16)))
    ratios = np.exp([r.log_ml - exact.log_z for r in on])
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * sigma + 0.05, (ratios.mean(), sigma)


# The sharper divisors, on the generic toys ------------------------------------

GRAMMAR = """
1: S -> ( S )
1: S -> [ S S ]
1: S -> x
1: S -> y
"""


def test_byte_classes_group_the_bytes_read_at_the_same_places():
    """`x` and `y` are read by the same rules at the same places; the brackets are
    not interchangeable with anything; a Lark grammar's letters and digits each form
    a class (read through one-rule nonterminals)."""
    classes = byte_classes(BoolCFG.from_string(GRAMMAR).model.cfg)
    assert classes[ord("y")] == classes[ord("x")] == ord("x")
    assert len({classes[b] for b in b"()[]x"}) == 5
    lark = byte_classes(BoolCFG.from_lark(LARK).model.cfg)
    assert len({lark[b] for b in b"abcxyz"}) == 1 and len({lark[b] for b in b"0129"}) == 1
    assert len({lark[b] for b in b"[],a0"}) == 5


@pytest.mark.parametrize("grammar", [GRAMMAR, "lark"])
def test_the_class_walk_gives_the_token_walk_counts(grammar):
    """Per token, the walk over byte classes gives the fewest bytes the walk over the
    tokens themselves gives, after every context of up to 3 tokens."""
    g = BoolCFG.from_lark(LARK) if grammar == "lark" else BoolCFG.from_string(GRAMMAR)
    vocab = (
        [b"[", b"]", b",", b"1", b"a", b"ab", b"z1", b"9]", b"a,b", b"]["]
        if grammar == "lark"
        else [b"(", b")", b"x", b"y", b"xy", b"(x", b"y)", b"[", b"]", b"yx)"]
    )
    c = g.coerce(vocab, f=b"".join)
    plain = type(c)(g, vocab, b"".join)
    plain._classes = (plain.trie.children, np.asarray(plain._leaf, dtype=np.int64))
    contexts = [[]]
    for _ in range(3):
        contexts = [ctx + [t] for ctx in contexts for t in vocab if len(contexts) < 400]
        for ctx in contexts:
            text = b"".join(ctx)
            if g.chart(list(text)) is not None:
                assert (c._bytes_after(text) == plain._bytes_after(text)).all(), text
        contexts = [ctx for ctx in contexts if g.chart(list(b"".join(ctx))) is not None]


def test_long_tokens_no_document_holds_do_not_weaken_the_bounds():
    """A token of bytes no terminal reads (a grammar), or of bytes the JSON count
    never counts (runs of `-` or spaces), does not set the divisor, and the target
    with the budget is still the exact one."""
    border, spaces = b"-" * 12, b" " * 12
    g = BoolCFG.from_string(GRAMMAR)
    vocab = [b"(", b")", b"x", b"((", b"))", b"[", b"]", b"x)", border]
    rng = np.random.default_rng(3)
    lm = BigramLM(vocab, {k: rng.dirichlet(np.ones(len(vocab) + 1)) for k in [None, *vocab]})
    condition = g.generic_coercion(lm, b"".join, False, True, None)  # unpruned, as the twin
    assert len(condition.vocab) == len(vocab) and condition._budget_parts()[2] == 2
    assert budget_keeps_target(direct_token_sampler(lm * condition), lm, condition, (3, 5, 6))

    s = JsonSchema(SCHEMA)
    counted = mandated_bytes(s.root)
    assert mandated_weight(border, counted) == mandated_weight(spaces, counted) == 0
    assert mandated_bytes(JsonSchema({"type": "string", "minLength": 1}).root) is None
    jvocab = [b"{", b"}", b'"a":', b"[", b"]", b"0", b"1", b",", b"]}", border, spaces]
    lm = BigramLM(jvocab, {k: rng.dirichlet(np.ones(len(jvocab) + 1)) for k in [None, *jvocab]})
    condition = s.coerce(lm, f=b"".join)
    assert condition._budget_parts()[1] == 4  # `"a":`
    assert budget_keeps_target(direct_token_sampler(lm * condition), lm, condition, (5, 6, 7))


def test_a_grammar_with_a_large_walk_is_not_pruned_on_the_engine_path(llm):
    """Past `budget_max_nodes` nodes of the class walk the engine path offers no
    bound (each node costs an Earley column), and a run prunes nothing."""
    nested = 'start: "[" item ("," item)* "]"\nitem: /[0-9]+/ | start'  # not regular
    condition = BoolCFG.from_lark(nested).coerce(llm, f=b"".join)
    assert isinstance(condition, GuidedCoerced)
    condition.budget_max_nodes = 4
    assert fast_paths.tokens_to_finish(condition) is None
    fresh = BoolCFG.from_lark(nested).coerce(llm, f=b"".join)
    assert fast_paths.tokens_to_finish(fresh) is not None


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_the_engine_reads_its_twins_largest_bound_and_changes_no_draw(llm, name, monkeypatch):
    """A regular grammar's twin is a byte automaton, which offers its largest bound
    per state (`MostTokensToFinish`); the engine coercion forwards it, and seeded
    runs are the same, weight for weight, as with the rows of bounds made at every
    step (the largest bounds hidden from the budget)."""
    lm = sparse_lm(llm, LARK_PIECES, 3)

    def run():
        condition = engine_condition(llm, "lark")
        condition._tokens_to_finish, made = counting_calls(condition._tokens_to_finish)
        sampler = direct_token_sampler(lm * condition) if name == "direct" else AWRS(lm, condition)
        out = [asyncio.run(sampler.smc(6, 0.5, m, seed=s)) for m in (5, 12) for s in range(3)]
        return [(r.contexts, r.log_weights.tolist()) for r in out], len(made)

    assert fast_paths.most_tokens_to_finish(engine_condition(llm, "lark")) is not None
    fast, made_fast = run()
    monkeypatch.setattr(fast_paths, "most_tokens_to_finish", lambda p: None)
    slow, made_slow = run()
    assert fast == slow
    assert made_fast < made_slow


class _KeptTwin:
    """A twin whose bound is a block it keeps and hands out as it is (allowed by
    `TokensToFinish`): row 0 finite, row 1 all `inf` (dead under the twin)."""

    def __init__(self, width: int, grammar: bool):
        self.block = np.full((2, width), np.inf)
        self.block[0] = np.arange(width, dtype=np.float64)
        if grammar:
            self._class_trie = lambda: ([0], None)  # read near the horizon only

    async def batch_tokens_to_finish(self, contexts):
        assert len(contexts) <= 2
        return self.block[: len(contexts)]


@pytest.mark.parametrize("grammar", [False, True])
def test_the_engine_reads_its_twins_block_without_writing_it(llm, grammar):
    """Every context near: the twin's rows as they are, a row dead under the twin read
    as 0 (prune nothing); a grammar's twin read within `budget_within` tokens of the
    horizon only (0 elsewhere); the twin's own block never written."""
    condition = engine_condition(llm, "lark")
    width = len(condition.vocab_eos)
    twin = _KeptTwin(width, grammar)
    kept = twin.block.copy()
    condition._twin = twin
    contexts = [[], [llm.vocab[1]], [llm.vocab[1]] * 5]

    async def bounds(cs, m):
        with using_horizon(m):
            return await condition.batch_tokens_to_finish(cs)

    got = asyncio.run(bounds(contexts[:2], 3))  # both near: 1 and 0 tokens left
    assert np.array_equal(got[0], kept[0]) and (got[1] == 0).all()
    assert np.array_equal(twin.block, kept)
    got = asyncio.run(bounds(contexts[:1], 3))
    assert np.array_equal(got[0], kept[0])
    if grammar:  # a horizon of 4 leaves 2, 1 and -3 tokens: the first context is far
        got = asyncio.run(bounds(contexts, 4))
        assert (got[0] == 0).all() and np.array_equal(got[1], kept[0]) and (got[2] == 0).all()
    assert np.array_equal(twin.block, kept)
