"""Budget-aware sampling for grammars and JSON schemas: a lower bound on the bytes
to a complete document, and the target unchanged by the pruning it allows.

Toys: a bigram LM over a few byte tokens, a nested grammar (`BoolCFG`) and a small
object schema (`JsonSchema`) coerced onto it. Bounds are checked against a
breadth-first search over bytes (the constraint's own `prefix`/`complete`);
samplers against `enumerate_target` through `sampler_target`, which runs every random
path of every step, with and without the budget.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from toys import BigramLM
from toys.core import budget_keeps_target

from genlm.control import AWRS, BoolCFG, JsonSchema, direct_token_sampler
from genlm.control.constraints.cfg._cfg_budget import ChartDistance
from genlm.control.constraints.json_schema._json_budget import fewest_bytes
from genlm.control.potential import fast_paths
from genlm.control.testing import enumerate_target

GRAMMAR = """
1: S -> ( S )
1: S -> [ S S ]
1: S -> x
"""
GRAMMAR_VOCAB = [b"(", b")", b"x", b"((", b"))", b"[", b"]", b"x)"]
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": 1}},
    "required": ["a"],
    "additionalProperties": False,
}
JSON_VOCAB = [b"{", b"}", b'"a":', b"[", b"]", b"0", b"1", b",", b"]}"]


def bigram(vocab, seed: int = 0) -> BigramLM:
    rng = np.random.default_rng(seed)
    rows = {k: rng.dirichlet(np.ones(len(vocab) + 1)) for k in [None, *vocab]}
    return BigramLM(vocab, rows)


def grammar():
    return BoolCFG.from_string(GRAMMAR)


def schema():
    return JsonSchema(SCHEMA)


async def fewest_by_search(potential, text: bytes, alphabet: bytes, limit: int = 12) -> float:
    """The fewest bytes `z` with `text + z` complete: breadth-first over texts whose
    `prefix` is finite (inf past `limit` bytes)."""
    level = {text}
    for n in range(limit + 1):
        for t in level:
            if await potential.complete(list(t)) > -math.inf:
                return float(n)
        nxt = set()
        for t in level:
            for b in alphabet:
                if await potential.prefix(list(t + bytes([b]))) > -math.inf:
                    nxt.add(t + bytes([b]))
        level = nxt
    return math.inf


async def live_texts(potential, alphabet: bytes, depth: int) -> list[bytes]:
    """Texts of at most `depth` bytes of `alphabet` whose `prefix` is finite."""
    out, level = [b""], [b""]
    for _ in range(depth):
        level = [
            t + bytes([b])
            for t in level
            for b in alphabet
            if await potential.prefix(list(t + bytes([b]))) > -math.inf
        ]
        out += level
    return out


def test_chart_distance_is_the_fewest_bytes():
    """On the nested grammar the chart's count is exactly the breadth-first search's,
    from every live prefix of up to 4 bytes."""
    g = grammar()
    distance = ChartDistance(g.model)

    async def check():
        for text in await live_texts(g, b"()[]x", 3):
            want = await fewest_by_search(g, text, b"()[]x")
            got = (
                0.0
                if await g.complete(list(text)) > -math.inf
                else distance.fewest(g.chart(list(text)))
            )
            assert got == want, (text, got, want)

    asyncio.run(check())


def test_json_bound_is_below_the_fewest_bytes():
    """The schema's structural count never exceeds the fewest bytes to a complete
    document (the search over the recognizer), and is exact at some prefixes."""
    s = schema()
    alphabet = b'{}"a:[]0,'

    async def check():
        exact = 0
        for text in await live_texts(s, alphabet, 7):
            want = await fewest_by_search(s, text, alphabet)
            got = fewest_bytes(s.state(list(text)))
            assert got <= want, (text, got, want)
            exact += got == want
        assert exact > 0

    asyncio.run(check())


def test_json_bound_counts_the_required_keys_a_typed_key_cannot_be():
    """In an object that allows other keys, a key being typed that can no longer be a
    required one leaves that key owed: after `{"x` the bound is 13 bytes of the 14 in
    `":0,"name":""}` (the comma is not counted), not 2. Where the typed text begins the
    required name it may be that key, which is then not owed twice. At every prefix of
    documents with other keys, escapes and nested values the bound never exceeds the
    bytes that the document still has."""
    s = JsonSchema(
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    )

    def bound(text: bytes) -> float:
        return fewest_bytes(s.state(list(text)))

    assert bound(b'{"x') == 13
    assert bound(b'{"na') == 4  # `me"` may close it: the quote, `:`, a value byte, `}`
    assert bound(b'{"nb') == 13
    assert bound(b'{"name') == 4
    assert bound(b'{"name":"",') == 5  # some key: `"":` and a value byte, then `}`
    docs = [
        b'{"x":0,"name":""}',
        b'{"name":"a","x":[1,{"y":null}]}',
        b'{"\\u006eame":"q","n":{"name":1}}',
        b'{"na":true,"nam":"","name":"n"}',
        b'{"x":{"a":[]},"y":"\\"","name":"\\u00e9"}',
    ]

    async def check():
        for doc in docs:
            assert await s.complete(list(doc)) > -math.inf, doc
            for i in range(len(doc) + 1):
                assert bound(doc[:i]) <= len(doc) - i, (doc[:i], bound(doc[:i]))

    asyncio.run(check())


@pytest.mark.parametrize("kind", ["cfg", "json"])
def test_coercions_offer_the_bound(kind):
    lm = bigram(GRAMMAR_VOCAB if kind == "cfg" else JSON_VOCAB)
    condition = (grammar() if kind == "cfg" else schema()).coerce(lm, f=b"".join)
    assert fast_paths.tokens_to_finish(condition) is not None
    assert fast_paths.tokens_to_finish(lm * condition) is not None


def make(name, lm, condition):
    return direct_token_sampler(lm * condition) if name == "direct" else AWRS(lm, condition)


@pytest.mark.parametrize("name", ["direct", "awrs"])
@pytest.mark.parametrize("kind", ["cfg", "json"])
def test_pruning_leaves_the_target_unchanged(kind, name):
    """Every random path of every step, with the budget and without: the same `Z`
    and posterior as `enumerate_target`, and the budget visits fewer contexts."""
    vocab, max_lens = (GRAMMAR_VOCAB, (3, 5, 6)) if kind == "cfg" else (JSON_VOCAB, (5, 6, 7))
    lm = bigram(vocab, 1)
    condition = (grammar() if kind == "cfg" else schema()).coerce(lm, f=b"".join)
    sampler = make(name, lm, condition)
    pruned = budget_keeps_target(sampler, lm, condition, max_lens)
    assert pruned, "the budget pruned no context"


BYTE_VOCABS = {"cfg": [bytes([b]) for b in b"()[]x"], "json": [bytes([b]) for b in b'{}"a:[]0,1']}


@pytest.mark.parametrize("kind", ["cfg", "json"])
def test_runs_near_the_budget_finish(kind):
    """Seeded runs at ESS 0.5 with a budget that a document fits (one-byte tokens,
    where the byte count is the token count): without the bound some particles reach
    `max_tokens` unfinished; with it none does."""
    vocab, max_tokens = (BYTE_VOCABS["cfg"], 6) if kind == "cfg" else (BYTE_VOCABS["json"], 11)
    lm = bigram(vocab, 2)
    condition = (grammar() if kind == "cfg" else schema()).coerce(lm, f=b"".join)
    sampler = direct_token_sampler(lm * condition)

    async def dead(budget_aware: bool) -> int:
        runs = await asyncio.gather(
            *(sampler.smc(8, 0.5, max_tokens, seed=s, budget_aware=budget_aware) for s in range(16))
        )
        if budget_aware:
            assert all(r.log_ml > -math.inf for r in runs)
        return sum(int(np.isneginf(r.log_weights).sum()) for r in runs)

    assert asyncio.run(dead(True)) == 0
    assert asyncio.run(dead(False)) > 0


@pytest.mark.parametrize("kind", ["cfg", "json"])
def test_smc_with_the_bound_is_unbiased(kind):
    """300 seeded runs with resampling under the budget: the mean of `Ẑ/Z` is within
    4σ + 0.05 of 1, `Z` from `enumerate_target`."""
    vocab, max_tokens = (GRAMMAR_VOCAB, 6) if kind == "cfg" else (JSON_VOCAB, 8)
    lm = bigram(vocab, 4)
    condition = (grammar() if kind == "cfg" else schema()).coerce(lm, f=b"".join)
    sampler = direct_token_sampler(lm * condition)
    exact = asyncio.run(enumerate_target(lm, max_tokens, condition=condition))

    async def runs():
        return await asyncio.gather(*(sampler.smc(4, 0.5, max_tokens, seed=s) for s in range(300)))

    ratios = np.exp([r.log_ml - exact.log_z for r in asyncio.run(runs())])
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * sigma + 0.05, (ratios.mean(), sigma)


def test_cfg_cheap_rows_are_below_the_walked_rows():
    """Far from the horizon the grammar's rows come without the trie walk; they never
    exceed the walked rows (so they prune no more), and the walk is taken near it."""
    from genlm.control.horizon import using_horizon

    lm = bigram(GRAMMAR_VOCAB)
    condition = grammar().coerce(lm, f=b"".join)
    contexts = [[], [b"(("], [b"[", b"(", b"x)"], [b"[", b"x"], [b"x"]]

    async def rows(within: int):
        condition.budget_walk_within = within
        with using_horizon(30):
            return await condition.batch_tokens_to_finish(contexts)

    cheap, walked = asyncio.run(rows(0)), asyncio.run(rows(100))
    assert (cheap <= walked).all()
    assert (cheap < walked).any()
    assert walked[-1, -1] == 0 and np.isinf(walked[0, -1])


def test_json_largest_bound_is_the_rows_largest_finite_entry():
    """`CoercedJson.batch_most_tokens_to_finish` is exactly the largest finite entry of
    each context's `batch_tokens_to_finish` row (`-inf` where none), on both of the
    row's branches (far from the horizon: the cheap row; near it: the walked one),
    for live, finished and dead contexts, at every horizon from 2 to 14."""
    from genlm.control.horizon import using_horizon

    lm = bigram(JSON_VOCAB)
    condition = schema().coerce(lm, f=b"".join)
    assert fast_paths.most_tokens_to_finish(condition) is not None
    assert fast_paths.most_tokens_to_finish(lm * condition) is not None
    by = {bytes(t): t for t in lm.vocab}
    texts = [[], [b"{"], [b"{", b'"a":'], [b"{", b'"a":', b"["], [b"{", b'"a":', b"[", b"1"],
             [b"{", b'"a":', b"[", b"0", b","], [b"{", b'"a":', b"[", b"1", b"]}"], [b"}"], [b"{", b"{"]]
    contexts = [[by[p] for p in t] for t in texts]

    async def both(m: int, within: int):
        condition.budget_walk_within = within
        with using_horizon(m):
            rows = np.asarray(await condition.batch_tokens_to_finish(contexts))
            most = np.asarray(await condition.batch_most_tokens_to_finish(contexts))
        return rows, most

    branches = set()
    for within in (0, 2, 100):
        for m in range(2, 15):
            rows, most = asyncio.run(both(m, within))
            finite = np.where(rows < np.inf, rows, -np.inf).max(axis=1)
            assert most.tolist() == finite.tolist(), (m, within)
            branches.add(bool((rows[:, :-1] < np.inf).all(axis=1).any()))  # a cheap row seen
    assert branches == {True, False}
    condition.budget_walk_within = 4


@pytest.mark.parametrize("name", ["direct", "awrs"])
def test_json_largest_bound_skips_the_rows_and_changes_no_draw(name, monkeypatch):
    """With `MostTokensToFinish` the budget makes the schema's rows of bounds only
    where a bound may exceed the tokens left; seeded runs are the same, context for
    context and weight for weight, as with the rows made at every step (the largest
    bounds hidden from the budget)."""
    from toys.core import counting_calls

    lm = bigram(JSON_VOCAB, 5)

    def run():
        condition = schema().coerce(lm, f=b"".join)
        condition._tokens_to_finish, made = counting_calls(condition._tokens_to_finish)
        sampler = make(name, lm, condition)
        out = [asyncio.run(sampler.smc(6, 0.5, m, seed=s)) for m in (7, 20) for s in range(3)]
        return [(r.contexts, r.log_weights.tolist()) for r in out], len(made)

    fast, made_fast = run()
    monkeypatch.setattr(fast_paths, "most_tokens_to_finish", lambda p: None)
    slow, made_slow = run()
    assert fast == slow
    assert made_fast < made_slow
