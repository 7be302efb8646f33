"""The one token trie: its structure and its level walk equal per-token walks
(brute force over random vocabularies), and the automaton and JSON row walks built
on it equal reading each token's bytes one at a time."""

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genlm.control import WFSA, BoolFSA, JsonSchema
from genlm.control._trie import SymbolTrie
from genlm.control.weights import NEG_INF

vocabs = st.lists(st.binary(min_size=0, max_size=4).map(lambda b: bytes(x % 3 + 97 for x in b)), min_size=1, max_size=14)
settings_ = settings(max_examples=60, deadline=None)


def node_of(trie: SymbolTrie, path) -> int | None:
    """The node reached by `path` from the root, by the child maps (None: no such node)."""
    node = 0
    for s in path:
        node = trie.children[node].get(s)
        if node is None:
            return None
    return node


@settings_
@given(vocabs)
def test_structure_equals_brute_force(vocab):
    trie = SymbolTrie.build(vocab, b"".join)
    prefixes = {tuple(t[:k]) for t in vocab for k in range(len(t) + 1)}
    assert trie.n_nodes == len(prefixes)
    for i, token in enumerate(vocab):
        leaf = int(trie.leaf[i])
        assert trie.paths[i] == tuple(token) and trie.path(leaf) == list(token)
        assert node_of(trie, token) == leaf and i in trie.ends[leaf]
    depth = {0: 0}
    for d, level in enumerate(trie.levels, start=1):
        for n in level.tolist():
            depth[n] = d
            assert depth[int(trie.parent[n])] == d - 1 and len(trie.path(n)) == d
    assert sorted(depth) == list(range(trie.n_nodes))
    for n in range(trie.n_nodes):
        kids = trie.children[n]
        assert trie.kid_symbols[n].tolist() == list(kids) and trie.kid_nodes[n].tolist() == list(kids.values())
    weights = np.random.default_rng(len(vocab)).random(len(vocab))
    masses = trie.masses(weights)
    for n in range(trie.n_nodes):
        p = trie.path(n)
        want = sum(w for t, w in zip(vocab, weights) if list(t[: len(p)]) == p)
        assert masses[n] == pytest.approx(want, rel=1e-12)


def test_build_takes_any_context_map():
    trie = SymbolTrie.build(["ab", "a", "", "ba"], "".join)
    assert trie.paths == [("a", "b"), ("a",), (), ("b", "a")]
    assert trie.leaf.tolist() == [2, 1, 0, 4] and trie.symbol == [None, "a", "b", "b", "a"]
    assert trie.parent.tolist() == [-1, 0, 1, 0, 3] and [lv.tolist() for lv in trie.levels] == [[1, 3], [2, 4]]


def per_token_cum(trie: SymbolTrie, arc: np.ndarray) -> list[float]:
    """Each token's `Σ arc[node]` along its path, stopping at the first `-inf`."""
    out = []
    for token in trie.paths:
        total, node = 0.0, 0
        for s in token:
            if total == NEG_INF:
                break
            node = trie.children[node][s]
            total = total + arc[node]
        out.append(total)
    return out


@settings_
@given(vocabs, st.integers(0, 2**16), st.sampled_from([0.0, 0.3, 0.7]))
def test_walk_equals_per_token_walk_and_steps_only_below_live_nodes(vocab, seed, p_dead):
    trie = SymbolTrie.build(vocab, b"".join)
    rng = np.random.default_rng(seed)
    arc = np.where(rng.random(trie.n_nodes) < p_dead, NEG_INF, rng.normal(size=trie.n_nodes))
    stepped = []

    def step(parent_cum, parents, nodes):
        assert (parent_cum > NEG_INF).all() and (trie.parent[nodes] == parents).all()
        stepped.extend(nodes.tolist())
        return parent_cum + arc[nodes]

    cum = np.full(trie.n_nodes, NEG_INF)
    cum[0] = 0.0
    trie.walk(cum, step, lambda c: c > NEG_INF)
    assert cum[trie.leaf].tolist() == per_token_cum(trie, arc)
    want_visited = [n for n in range(1, trie.n_nodes) if per_token_cum_node(trie, arc, int(trie.parent[n])) > NEG_INF]
    assert sorted(stepped) == want_visited


def per_token_cum_node(trie, arc, node) -> float:
    total = 0.0
    for n in [int(x) for x in _chain(trie, node)]:
        if total == NEG_INF:
            return NEG_INF
        total += arc[n]
    return total


def _chain(trie, node):
    out = []
    while node > 0:
        out.append(node)
        node = int(trie.parent[node])
    return reversed(out)


@settings_
@given(vocabs, st.integers(0, 2**16), st.data())
def test_awalk_equals_walk_and_within_limits_it_to_the_chosen_paths(vocab, seed, data):
    trie = SymbolTrie.build(vocab, b"".join)
    rng = np.random.default_rng(seed)
    arc = np.where(rng.random(trie.n_nodes) < 0.2, NEG_INF, rng.normal(size=trie.n_nodes))
    chosen = data.draw(st.lists(st.integers(0, len(vocab) - 1), unique=True))
    within = trie.ancestors(trie.leaf[chosen])
    keep = np.zeros(trie.n_nodes, dtype=bool)
    keep[within] = True
    assert keep.tolist() == [
        n == 0 or any(trie.path(n) == list(vocab[i][: len(trie.path(n))]) for i in chosen)
        for n in range(trie.n_nodes)
    ]
    assert [lv.tolist() for lv in trie.sublevels(within)] == [
        lv.tolist() for lv in (np.sort(lv[keep[lv]]) for lv in trie.levels) if lv.size
    ]
    calls = []

    async def astep(parent_cum, parents, nodes):
        calls.append(nodes.tolist())
        return parent_cum + arc[nodes]

    cum = np.full(trie.n_nodes, NEG_INF)
    cum[0] = 0.0
    asyncio.run(trie.awalk(cum, astep, lambda c: c > NEG_INF, within=within))
    assert all(keep[n] for level in calls for n in level) and all(level for level in calls)
    full = per_token_cum(trie, arc)
    assert [cum[trie.leaf[i]] for i in chosen] == [full[i] for i in chosen]
    sync = np.full(trie.n_nodes, NEG_INF)
    sync[0] = 0.0
    trie.walk(sync, lambda c, p, n: c + arc[n], lambda c: c > NEG_INF, within=within)
    assert np.array_equal(sync, cum)


# Automaton and JSON rows: one trie walk = each token's bytes read one at a time -----

REGEXES = [r"(ab|a[bc]+)*c?", r"[ab]+c[abc]*", r"a*b?c{0,2}", r"(abc|b)+"]


def dfa_row(fsa, vocab, q) -> np.ndarray:
    """The coerced row at automaton state `q`, token by token."""
    a = fsa.automaton
    with np.errstate(divide="ignore"):
        log_beta = np.log(a.beta)
    row = []
    for token in vocab:
        s, logw = q, 0.0
        for b in token:
            logw += a.log_arc[s, b]
            s = int(a.delta[s, b])
            if s < 0:
                break
        if s < 0 or a.beta[s] == 0:
            row.append(NEG_INF)
        else:
            row.append(0.0 if a.boolean else logw + log_beta[s] - log_beta[q])
    return np.array(row)


@settings(max_examples=40, deadline=None)
@given(vocabs, st.sampled_from(REGEXES), st.sampled_from([BoolFSA, WFSA]))
def test_dfa_rows_equal_per_token_automaton_walks(vocab, pattern, cls):
    fsa = cls.from_regex(pattern)
    coerced = fsa.coerce(list(dict.fromkeys(vocab)), f=b"".join, prune=False, engine=False)
    a = fsa.automaton
    for q in range(a.n_states):
        if a.beta[q] > 0:
            got = coerced._walk(q)[:-1]
            want = dfa_row(fsa, coerced.vocab, q)
            assert np.allclose(got, want, rtol=1e-12, atol=0) or np.array_equal(got, want), (q, got, want)


JSON_VOCAB = [b"[", b'"', b"a", b"ab", b'",', b'"]', b"]", b'b"', b" ", b'["a', b",", b'"a"', b"1", b"12", b"{"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(JSON_VOCAB), min_size=1, max_size=12, unique=True), st.integers(0, 6))
def test_json_rows_equal_per_token_recognizer_walks(vocab, steps):
    schema = JsonSchema({"type": "array", "items": {"type": "string"}})
    coerced = schema.coerce(vocab, f=b"".join, prune=False)
    t = schema.transitions
    state = t.root
    for b in b'["a","b'[:steps]:
        state = t.next_state(state, b)
    want = []
    for token in coerced.vocab:
        s = state
        for b in token:
            s = t.next_state(s, b)
            if s is None:
                break
        want.append(0.0 if s is not None else NEG_INF)
    assert coerced._walk(state)[:-1].tolist() == want
