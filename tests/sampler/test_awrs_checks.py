"""AWRS's kept answers and a coercion's token trie: the same law and weights, fewer
condition calls (never the same question twice; a dead byte prefix settles every
token below it)."""

import itertools
import math

import numpy as np
import pytest
from toys.tables import NextTable

from genlm.control import Potential
from genlm.control.draw import using_rng
from genlm.control.potential import fast_paths
from genlm.control.sampler.awrs import AWRS
from genlm.control.testing import assert_properly_weighted, expected_logws

NEG_INF = float("-inf")
ALPHABET = b"abcq"
TOKENS = [bytes(t) for n in (1, 2, 3) for t in itertools.product(ALPHABET, repeat=n)]  # 84 tokens
SMALL = [bytes(t) for n in (1, 2) for t in itertools.product(b"aq", repeat=n)]  # 6: exact enumeration


class QuotedBytes(Potential):
    """Bytes of the form `q[ab]*q`: a prefix must start with `q`; counts the texts asked."""

    def __init__(self):
        super().__init__(list(ALPHABET))
        self.asked: list[tuple] = []

    def _prefix_ok(self, text: bytes) -> bool:
        if not text:
            return True
        if text[0] != ord("q"):
            return False
        body = text[1:]
        if ord("q") in body[:-1] or ord("c") in body:
            return False
        return True

    async def prefix(self, context):
        self.asked.append(tuple(context))
        return 0.0 if self._prefix_ok(bytes(context)) else NEG_INF

    async def complete(self, context):
        self.asked.append(("complete", *context))
        text = bytes(context)
        return 0.0 if len(text) >= 2 and self._prefix_ok(text) and text[-1] == ord("q") else NEG_INF


class Hidden(Potential):
    """`inner` without its token trie: AWRS checks each drawn token."""

    def __init__(self, inner: Potential):
        super().__init__(tables=inner.tables)
        self.inner = inner

    async def prefix(self, context):
        return await self.inner.prefix(context)

    async def complete(self, context):
        return await self.inner.complete(context)


def llm_like(seed: int, tokens: list = TOKENS) -> NextTable:
    rng = np.random.default_rng(seed)
    rows: dict = {}

    def row(ctx):
        if ctx not in rows:
            rows[ctx] = np.log(rng.dirichlet(np.full(len(tokens) + 1, 0.3)))
        return rows[ctx]

    return NextTable(tokens, row)


def sampler(seed: int, hide: bool = False, tokens: list = TOKENS, **kwargs):
    lm, inner = llm_like(seed, tokens), QuotedBytes()
    condition = inner.coerce(lm, f=b"".join)
    if hide:
        condition = Hidden(condition)
    s = AWRS(lm, condition, **kwargs)
    s.enumerate_at = 0  # always search
    return s, inner


def test_a_homomorphic_coercion_declares_its_token_trie():
    lm = llm_like(0)
    c = QuotedBytes().coerce(lm, f=b"".join)
    assert "token_trie" in fast_paths.declared(c)
    assert "token_trie" in fast_paths.declared(c.to_autobatched())
    assert "token_trie" not in fast_paths.declared(QuotedBytes().coerce(lm, f=lambda xs: b"".join(xs[::-1])))


@pytest.mark.parametrize("config", [{}, {"estimator": "recursive"}, {"max_accepts": 3}, {"autobatch": False}])
async def test_awrs_with_the_trie_is_properly_weighted(config):
    for seed in range(3):
        s, _ = sampler(seed, tokens=SMALL, **config)
        for context in ([], [b"q"], [b"qa"]):
            await assert_properly_weighted(s, context)


async def test_kept_answers_and_the_trie_leave_the_weights_of_every_path_unchanged():
    for seed in range(3):
        with_trie, _ = sampler(seed, tokens=SMALL)
        without, _ = sampler(seed, hide=True, tokens=SMALL)
        for context in ([], [b"q"]):
            a, b = await expected_logws(with_trie, context), await expected_logws(without, context)
            assert a.keys() == b.keys()
            for k in a:
                assert a[k] == pytest.approx(b[k], rel=1e-12, abs=1e-300)


async def test_seeded_searches_are_unbiased_and_draw_the_target():
    """Generator-driven searches (blocks cut at the first unknown draw): the mean
    weight is the allowed mass and each token's weighted frequency its target, within 4σ."""
    s, _ = sampler(5)
    target = await s.target.logw_next([])
    want = {x: math.exp(v) for x, v in zip(s.target.vocab_eos, target.weights) if v > NEG_INF}
    n = 4000
    got: dict = {}
    ws = np.empty(n)
    with using_rng(np.random.default_rng(0)):
        for i in range(n):
            token, logw, _ = await s.sample([])
            ws[i] = math.exp(logw)
            got.setdefault(token, []).append(ws[i])
    total = sum(want.values())
    assert abs(ws.mean() - total) < 4 * ws.std() / math.sqrt(n)
    for x, mass in want.items():
        f = np.zeros(n)
        f[: len(got.get(x, []))] = got.get(x, [])
        # f ≤ w pointwise, so E[f²] ≤ E[w²] bounds each token's σ (rare tokens may go unseen)
        assert abs(f.mean() - mass) < 4 * math.sqrt((ws**2).mean() / n), x


async def test_no_question_is_asked_twice_after_one_context():
    s, inner = sampler(1)
    with using_rng(np.random.default_rng(3)):
        for _ in range(40):
            await s.sample([b"q"])
    assert len(inner.asked) == len(set(inner.asked))


async def test_a_dead_first_byte_settles_every_token_below_it():
    """After the empty context only tokens starting with `q` are allowed: the trie
    answers need at most one call per first byte and per token under `q`, far fewer
    than the tokens drawn; checked token by token, each distinct draw is one call."""
    s, inner = sampler(2)
    hidden, hidden_inner = sampler(2, hide=True)
    with using_rng(np.random.default_rng(1)):
        for _ in range(30):
            await s.sample([])
    under_q = sum(t[:1] == b"q" for t in TOKENS)
    assert len(inner.asked) <= len(ALPHABET) + under_q + 1  # + EOS
    with using_rng(np.random.default_rng(1)):
        for _ in range(30):
            await hidden.sample([])
    assert len(inner.asked) < len(hidden_inner.asked)


@pytest.mark.parametrize("hide", [False, True], ids=["trie", "token by token"])
async def test_the_particles_of_a_step_ask_each_question_once(hide):
    """Concurrent searches after one context await the calls in flight of the others
    instead of asking again: one step of 32 particles asks no text twice."""
    s, inner = sampler(4, hide=hide)
    out = await s.batch_sample([[] for _ in range(32)], [np.random.default_rng(k) for k in range(32)])
    assert len(out) == 32 and inner.asked
    assert len(inner.asked) == len(set(inner.asked))


async def test_a_dead_node_is_asked_about_only_when_a_second_token_below_it_is_drawn():
    """A rejected token costs one call; the byte above it is asked about (and settles
    every token below it) when another token below it comes."""
    from genlm.control.sampler._awrs_checks import CheckMemo

    lm, inner = llm_like(0), QuotedBytes()
    condition = inner.coerce(lm, f=b"".join)
    memo = CheckMemo(None, _index(condition))
    position = {t: i for i, t in enumerate(condition.vocab)}
    checks = memo.at(condition, [])
    ok, calls = await checks.answer(np.array([position[b"ab"]]))
    assert not ok[0] and calls == 1 and inner.asked == [tuple(b"ab")]
    ok, calls = await checks.answer(np.array([position[b"acb"]]))  # asks b"a": dead
    assert not ok[0] and calls == 1 and inner.asked[-1] == tuple(b"a")
    below_a = np.array([i for t, i in position.items() if t[:1] == b"a"])
    ok, calls = await checks.answer(below_a)
    assert not ok.any() and calls == 0
    ok, calls = await checks.answer(np.array([position[b"qa"], position[b"qab"]]))
    assert ok.all() and calls == 2


async def test_a_waiter_asks_again_when_the_call_it_awaits_is_cancelled():
    """`Known.settle`: the keys of a cancelled call are asked by those waiting on
    them, and no key stays marked as in flight."""
    import asyncio

    from genlm.control.sampler._awrs_checks import Known

    known, record = Known(), {}
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(keys):
        started.set()
        await release.wait()
        return [True] * len(keys)

    async def fast(keys):
        return [k % 2 == 0 for k in keys]

    first = asyncio.ensure_future(known.settle([1, 2], slow, lambda ks, vs: record.update(zip(ks, vs))))
    await started.wait()
    second = asyncio.ensure_future(known.settle([2, 3], fast, lambda ks, vs: record.update(zip(ks, vs))))
    await asyncio.sleep(0)
    first.cancel()
    answers, calls = await second
    assert answers == {2: True, 3: False} and calls == 2 and record == {2: True, 3: False}
    assert first.cancelled() and not known.asking


def _index(condition):
    from genlm.control.sampler._awrs_checks import TrieIndex

    trie = fast_paths.token_trie(condition)
    return TrieIndex(trie, trie.inner)
