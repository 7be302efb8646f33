"""Budget-aware sampling: exact token distances, and the target unchanged by pruning.

The toy: tokens `a, b, ab, ba, .` with a seeded bigram LM, and byte regexes coerced
onto them. Distances are checked against a breadth-first search over token
sequences; samplers against `enumerate_target` through `sampler_target`, which runs
every random path of every step (with and without the budget).
"""

from __future__ import annotations

import asyncio
import math
import re

import numpy as np
import pytest
import regex
from toys import BigramLM, Searched
from toys.core import budget_keeps_target, counting_calls

from genlm.control import AWRS, WFSA, BoolFSA, direct_token_sampler, eager_token_sampler
from genlm.control.potential import fast_paths
from genlm.control.sampler.budget import (
    OUT_OF_BUDGET,
    DeadEnd,
    budget_of,
    cause_of,
    tokens_left,
    using_horizon,
)
from genlm.control.testing import enumerate_target

VOCAB = [b"a", b"b", b"ab", b"ba", b"."]
PATTERNS = [r"(ab)+\.", r"a+b+\.", r"(a|b)(ab|ba){2,3}\.", r"b{5}\.|a\."]


def bigram(seed: int = 0) -> BigramLM:
    rng = np.random.default_rng(seed)
    rows = {k: rng.dirichlet(np.ones(len(VOCAB) + 1)) for k in [None, *VOCAB]}
    return BigramLM(VOCAB, rows)


def fewest_tokens(pattern: str, text: bytes, limit: int = 12) -> float:
    """The fewest tokens `z` (bytes joined) with `text + z` in the language: a
    breadth-first search over texts, keeping those that are prefixes of the language
    (`regex`'s partial match, independent of our automata); inf past `limit` tokens."""
    level = {text} if regex.fullmatch(pattern, text.decode(), partial=True) else set()
    for n in range(limit + 1):
        if any(regex.fullmatch(pattern, t.decode()) for t in level):
            return float(n)
        level = {t + y for t in level for y in VOCAB if regex.fullmatch(pattern, (t + y).decode(), partial=True)}
    return math.inf


def live_prefixes(pattern: str, depth: int) -> list[list[bytes]]:
    """Token sequences of at most `depth` tokens whose text is a prefix of the language."""
    out, level = [[]], [[]]
    for _ in range(depth):
        level = [x + [y] for x in level for y in VOCAB if regex.fullmatch(pattern, b"".join(x + [y]).decode(), partial=True)]
        out += level
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
def test_automaton_distances_are_the_fewest_tokens(pattern):
    """`batch_tokens_to_finish(ctx)[y]` is the fewest tokens after `ctx + [y]` to an
    accepted string (inf where none), and the EOS entry is 0 exactly where `ctx` is
    accepted; the search over the automaton's states is exact here."""
    c = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    contexts = live_prefixes(pattern, 3)
    rows = asyncio.run(c.batch_tokens_to_finish(contexts))
    assert c._distances.exact
    full = re.compile(pattern.encode())
    for ctx, row in zip(contexts, rows):
        text = b"".join(ctx)
        want = [fewest_tokens(pattern, text + y) for y in VOCAB]
        assert row[:-1].tolist() == want, (ctx, row)
        assert row[-1] == (0.0 if full.fullmatch(text) else math.inf)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_byte_bound_is_below_the_distances(pattern):
    """Past `max_budget_states` reachable states the bound is ⌈bytes left / longest
    token⌉: never above the exact count, so it prunes only what cannot end."""
    exact = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    bound = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    bound.max_budget_states = 1
    contexts = live_prefixes(pattern, 2)
    a = asyncio.run(exact.batch_tokens_to_finish(contexts))
    b = asyncio.run(bound.batch_tokens_to_finish(contexts))
    assert not bound._distances.exact
    assert (b <= a).all()
    assert np.array_equal(np.isinf(a), np.isinf(b))


def test_product_and_views_forward_the_bound():
    """The autobatched view forwards the coercion's bound; a product takes the larger
    of its factors' (an LM offers none), over the product's vocabulary."""
    lm = bigram()
    c = BoolFSA.from_regex(PATTERNS[0]).coerce(lm, f=b"".join)
    assert "tokens_to_finish" in fast_paths.declared(c)
    assert "tokens_to_finish" in fast_paths.declared(c.to_autobatched())
    assert "tokens_to_finish" not in fast_paths.declared(lm)
    d = BoolFSA.from_regex(PATTERNS[1]).coerce(lm, f=b"".join)
    both = (lm * c) * d
    contexts = [[], [b"a"], [b"ab"]]
    got = asyncio.run(fast_paths.tokens_to_finish(both)(contexts))
    rc, rd = (asyncio.run(x.batch_tokens_to_finish(contexts)) for x in (c, d))
    pos_c = [c.lookup[x] for x in both.vocab_eos]
    pos_d = [d.lookup[x] for x in both.vocab_eos]
    assert np.array_equal(got, np.maximum(rc[:, pos_c], rd[:, pos_d]))


def test_budget_prunes_what_cannot_end_in_time():
    """With `max_tokens = M`, after `n` tokens a token is kept iff at most `M - 2 - n`
    tokens after it suffice; EOS is always kept; outside a run nothing is pruned."""
    c = BoolFSA.from_regex(r"(ab)+\.").coerce(VOCAB, f=b"".join, prune=False)
    ctx = [[b"a"]]
    assert asyncio.run(budget_of(c, ctx)) is None
    with using_horizon(4):  # after "a" and one more token, no token may follow
        assert tokens_left(ctx[0]) == 1
        budget = asyncio.run(budget_of(c, ctx))
    by = dict(zip(c.vocab_eos, budget.ok[0].tolist()))
    # "a" + "b" needs "." after it (1 token): kept; "ba" needs "b", "." (2): pruned
    assert by == {b"a": False, b"b": True, b"ab": False, b"ba": False, b".": False, c.eos: True}
    assert not budget.stuck[0]


@pytest.mark.parametrize("name", ["direct", "awrs", "awrs-search", "awrs-search-budget", "set"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_pruning_leaves_the_target_unchanged(name, pattern):
    """Every random path of every step, with the budget and without: one particle's
    `E[Ẑ]` is `Z` and its weighted law is the posterior, for each sampler."""
    lm = bigram(1)
    condition = BoolFSA.from_regex(pattern).coerce(lm, f=b"".join)
    sampler = make(name, lm, condition)
    pruned = budget_keeps_target(sampler, lm, condition, (3, 5, 7))
    # a condition that offers no bound is left unpruned; every other one is pruned
    assert pruned == (name != "awrs-search"), "the budget pruned no context" if not pruned else name


def make(name: str, lm, condition):
    if name == "direct":
        return direct_token_sampler(lm * condition)
    if name == "awrs":
        return AWRS(lm, condition)
    if name.startswith("awrs-search"):
        # no cheap rows (5 tokens: AWRS checks its support whole); "-budget": the
        # condition offers its bound too
        sampler = AWRS(lm, Searched(condition, budget=name.endswith("budget")))
        assert not sampler.exact
        return sampler
    return eager_token_sampler(lm, condition.potential)


def test_budget_removes_every_dead_end():
    """With the budget no visited context is a dead end: every random path of every
    step of a sampler ends with positive weight (Z > 0 here); without it some do."""
    lm = bigram(2)
    condition = BoolFSA.from_regex(PATTERNS[2]).coerce(lm, f=b"".join)
    sampler = direct_token_sampler(lm * condition)

    async def dead_ends(budget_aware: bool) -> int:
        runs = await asyncio.gather(
            *(sampler.smc(8, 0.5, 6, seed=s, budget_aware=budget_aware) for s in range(20))
        )
        assert all(r.log_ml > -math.inf for r in runs) or not budget_aware
        return sum(int(np.isneginf(r.log_weights).sum()) for r in runs)

    assert asyncio.run(dead_ends(True)) == 0
    assert asyncio.run(dead_ends(False)) > 0


@pytest.mark.parametrize("name", ["direct", "awrs", "set"])
def test_context_without_completion_in_budget_is_a_dead_end_with_its_cause(name):
    """A context from which no string fits the tokens left gets `DeadEnd(OUT_OF_BUDGET)`:
    `-inf` as a number, its cause readable with `cause_of`."""
    lm = bigram(3)
    condition = BoolFSA.from_regex(r"b{5}\.|a\.").coerce(lm, f=b"".join)
    sampler = make(name, lm, condition)
    with using_horizon(4):  # after "b", at most 2 tokens: "b"*4 + "." needs 3 or more
        token, logw, _ = asyncio.run(sampler.sample([b"b"]))
    assert logw == -math.inf and cause_of(logw) == OUT_OF_BUDGET
    assert isinstance(logw, DeadEnd) and repr(logw) == f"DeadEnd({OUT_OF_BUDGET!r})"
    assert cause_of(-math.inf) is None


def test_smc_keyword_turns_the_budget_off():
    lm = bigram(2)
    condition = BoolFSA.from_regex(PATTERNS[2]).coerce(lm, f=b"".join)
    sampler = direct_token_sampler(lm * condition)
    with pytest.raises(TypeError, match="budget_aware"):
        asyncio.run(sampler.smc(2, 0.5, 5, budget_aware=1))
    on = asyncio.run(sampler.smc(4, 0.0, 6, seed=0))
    off = asyncio.run(sampler.smc(4, 0.0, 6, seed=0, budget_aware=False))
    assert on.log_weights.tolist() != off.log_weights.tolist()


@pytest.mark.parametrize("name", ["direct", "awrs", "awrs-search-budget"])
def test_smc_with_the_budget_is_unbiased(name):
    """Seeded runs with resampling (ESS 0.5) under the budget: the mean of `Ẑ/Z` over
    300 runs is within 4σ + 0.05 of 1, `Z` from `enumerate_target`."""
    lm = bigram(4)
    condition = BoolFSA.from_regex(PATTERNS[2]).coerce(lm, f=b"".join)
    sampler = make(name, lm, condition)
    exact = asyncio.run(enumerate_target(lm, 7, condition=condition))

    async def runs():
        return await asyncio.gather(*(sampler.smc(4, 0.5, 7, seed=s) for s in range(300)))

    ratios = np.exp([r.log_ml - exact.log_z for r in asyncio.run(runs())])
    sigma = ratios.std(ddof=1) / math.sqrt(len(ratios))
    assert abs(ratios.mean() - 1) < 4 * sigma + 0.05, (ratios.mean(), sigma)


def test_no_dead_particle_on_the_embedded_words_task():
    """The issue's task, a few seeds: two to five words and a period within 25 tokens.
    Every particle of every run ends in the language with positive weight."""
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The words are")
    pattern = r" [a-z]+( [a-z]+){1,4}\."
    sampler = AWRS(llm, BoolFSA.from_regex(pattern).coerce(llm, f=b"".join))

    async def runs():
        return await asyncio.gather(*(sampler.smc(8, 0.5, 25, seed=s) for s in range(4)))

    for seqs in asyncio.run(runs()):
        assert np.isfinite(seqs.log_weights).all()
        for context in seqs.contexts:
            text = b"".join(getattr(t, "byte_string", t) for t in context[:-1])
            assert regex.fullmatch(pattern.encode(), text), text


@pytest.mark.parametrize("name", ["direct", "awrs"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_bound_within_the_tokens_left_skips_the_rows_and_changes_no_draw(name, pattern):
    """`MostTokensToFinish`: where every context's largest bound is within the tokens
    left, the budget makes no row of bounds; seeded runs are the same, context for
    context and weight for weight, as with the rows made at every step."""
    lm = bigram(5)

    def run(skip: bool):
        condition = BoolFSA.from_regex(pattern).coerce(lm, f=b"".join)
        condition.batch_tokens_to_finish, made = counting_calls(condition.batch_tokens_to_finish)
        if not skip:
            condition.batch_most_tokens_to_finish = None
        sampler = make(name, lm, condition)
        out = [asyncio.run(sampler.smc(6, 0.5, m, seed=s)) for m in (6, 20) for s in range(3)]
        return [(r.contexts, r.log_weights.tolist()) for r in out], len(made)

    (fast, made_fast), (slow, made_slow) = run(True), run(False)
    assert fast == slow
    assert made_fast < made_slow


def reference_ends(c, q: int) -> np.ndarray:
    """Per token of `c`, its end state from `q` by a walk of the whole token trie (-1
    where the token's row entry, made from the same walk, is -inf)."""
    nodes = c._trie_states(q)
    row = c._row_from_nodes(q, nodes)
    return np.where(row[:-1] > -math.inf, nodes["q"][c._leaf], -1)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_boolean_automatons_ends_walk_the_byte_classes_not_the_tokens(pattern):
    """`_ends(q)` (the distances' successor states) and `_walk(q)` (the state's row) of
    a Boolean automaton walk the trie of the tokens' byte-class paths, not the token
    trie, and give for every state what the token trie's walk gives: the token's end
    state where its row allows it, -1 elsewhere; the same row."""
    c = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    reference = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    walks = []
    walk = c._trie_states
    c._trie_states = lambda q: walks.append(q) or walk(q)
    for q in range(len(c.potential.automaton.stop)):
        assert np.array_equal(c._ends(q), reference_ends(reference, q)), q
        assert np.array_equal(c._walk(q), reference._row_from_nodes(q, reference._trie_states(q))), q
    assert walks == []
    assert c._byte_class_trie[0].n_nodes <= c.trie.n_nodes


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_weighted_automatons_bounds_equal_the_boolean_ones(pattern):
    """A weighted automaton of the same language (its ends still come from the token
    trie's walk, with its row) gives the Boolean automaton's bounds, context for
    context, and the same largest bounds inside a run."""
    boolean = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    weighted = WFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    assert not weighted.boolean_rows
    contexts = live_prefixes(pattern, 3)
    for m in (None, 5, 8):
        with using_horizon(m):
            for f in ("batch_tokens_to_finish", "batch_most_tokens_to_finish"):
                a = asyncio.run(getattr(boolean, f)(contexts))
                b = asyncio.run(getattr(weighted, f)(contexts))
                assert np.array_equal(a, b), (f, m)


@pytest.mark.parametrize(
    "pattern",
    [
        r"[A-Z][a-z ,]{0,20}\.( [A-Z][a-z ,]{0,20}\.){0,2}",
        r" [a-z]+( [a-z]+)*\.",
        r"\{\"a\": [0-9]{1,5}\}",
        r"( the| a)*\.",  # tokens lead back to the start state
    ],
)
def test_the_byte_class_ends_on_the_embedded_vocabulary(llm, pattern):
    """On the embedded model's 4k tokens (pruned to those the automaton can read), the
    class trie is smaller than the token trie and the ends and rows equal the token
    trie's at every state; so do the distances."""
    c = BoolFSA.from_regex(pattern).coerce(llm, f=b"".join)._budget_twin()
    reference = BoolFSA.from_regex(pattern).coerce(llm, f=b"".join)._budget_twin()
    reference._ends = lambda q: reference_ends(reference, q)
    assert c._byte_class_trie[0].n_nodes < c.trie.n_nodes
    for q in range(len(c.potential.automaton.stop)):
        assert np.array_equal(c._ends(q), reference._ends(q)), q
        assert np.array_equal(c._walk(q), reference._row_from_nodes(q, reference._trie_states(q))), q
    assert np.array_equal(c._distances.of_states(), reference._distances.of_states())
    assert c._distances.exact == reference._distances.exact


@pytest.mark.parametrize("pattern", PATTERNS)
def test_within_the_tokens_left_the_largest_bound_is_the_ceiling(pattern):
    """`batch_most_tokens_to_finish`: outside a run, each context's largest finite
    bound; inside one, the automaton's largest finite distance wherever the tokens
    left reach it (never below the exact value), and the exact value nearer the
    horizon."""
    c = BoolFSA.from_regex(pattern).coerce(VOCAB, f=b"".join, prune=False)
    contexts = [x for x in live_prefixes(pattern, 3)]
    bounds = asyncio.run(c.batch_tokens_to_finish(contexts))
    exact = np.array([r[r < np.inf].max() if (r < np.inf).any() else -np.inf for r in bounds])
    assert np.array_equal(asyncio.run(c.batch_most_tokens_to_finish(contexts)), exact)
    dist = c._distances.of_states()
    ceiling = dist[dist < np.inf].max()
    assert c._distance_ceiling() == ceiling
    assert ceiling >= exact.max() > 0
    for m in range(2, 12):
        with using_horizon(m):
            most = asyncio.run(c.batch_most_tokens_to_finish(contexts))
        left = np.array([m - 2 - len(x) for x in contexts])
        want = np.where(left >= ceiling, ceiling, exact)
        assert np.array_equal(most, want), m
