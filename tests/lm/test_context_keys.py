"""`ContextKeys`: a model view's query keys are the plain ids (equal and hashing as
`start + ids`), repeated contexts get the same key object, and a context one token
longer names its predecessor's key as `parent`. The backends' lookups through that
hint (`PrefixCache.longest_kv`, `extension_groups`) answer what the slicing lookups
answer; in an SMC run every continued context finds its parent's states by it."""

import numpy as np
import pytest
import torch
from toys.core import counting_calls

from genlm.control import PromptedLLM, direct_token_sampler
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.lm._hf_batch import extension_groups
from genlm.control.lm._kv_cache import KV, Block, Ids, PrefixCache, parent_key
from genlm.control.lm._rows_memo import ContextKeys, ContextTails

START = (7, 8, 9)


def test_keys_are_the_ids_and_repeats_are_the_same_objects():
    memo = ContextKeys()
    tails = [(1,), (2, 3), (1,), ()]
    keys = memo.keys(START, tails, bound=100)
    assert [tuple(k) for k in keys] == [START + t for t in tails]
    assert all(type(k) is Ids and hash(k) == hash(START + t) for k, t in zip(keys, tails))
    assert keys[0] is keys[2]
    assert all(k.below == 100 and k.head is not None and tuple(k.head) == START for k in keys)
    again = memo.keys(START, [(2, 3), (1,)], bound=100)
    assert again[0] is keys[1] and again[1] is keys[0]


def test_a_context_one_token_longer_names_its_parent_and_chains_do_not_grow():
    memo = ContextKeys()
    (a,) = memo.keys(START, [(1,)], bound=100)
    b, c = memo.keys(START, [(1, 2), (1, 3)], bound=100)
    assert b.parent is a and c.parent is a
    assert parent_key(b) is a and parent_key(b) == START + (1,)
    (d,) = memo.keys(START, [(1, 2, 4)], bound=100)
    assert d.parent is b and b.parent is None  # b's own parent let go when d was made
    assert tuple(d) == START + (1, 2, 4)
    # without a recorded parent, `parent_key` slices
    assert parent_key((1, 2, 3)) == (1, 2)
    assert parent_key(a) == START


def test_two_generations_of_keys_are_kept_within_their_ids_budget():
    memo = ContextKeys()
    memo.KEPT_IDS = 8  # two keys of 4 ids fill a generation
    (a,) = memo.keys(START, [(1,)], bound=100)
    memo.keys(START, [(5,)], bound=100)  # the generation of `a` is full: now the previous
    (again,) = memo.keys(START, [(1,)], bound=100)
    assert again is a  # found in the previous generation, and kept in the current one
    memo.keys(START, [(6,), (7,)], bound=100)
    memo.keys(START, [(2,), (3,)], bound=100)  # two generations later: forgotten
    (fresh,) = memo.keys(START, [(1,)], bound=100)
    assert fresh == a and fresh is not a
    for i in range(100):
        memo.keys(START, [(i % 50, i)], bound=100)
    assert sum(map(len, memo._now.values())) < 8 + 5 and sum(map(len, memo._before.values())) < 8 + 5
    # runs that share a view each find their latest keys: four runs' keys, one call each
    memo = ContextKeys()
    firsts = [memo.keys(START, [(r, t) for t in range(16)], bound=100) for r in range(4)]
    seconds = [memo.keys(START, [(r, t, 9) for t in range(16)], bound=100) for r in range(4)]
    assert all(k.parent is p for ks, ps in zip(seconds, firsts) for k, p in zip(ks, ps))


def test_a_new_prompt_or_ids_out_of_range_are_not_taken_for_checked():
    memo = ContextKeys()
    (a,) = memo.keys(START, [(1,)], bound=100)
    (b,) = memo.keys((7, 8), [(9, 1)], bound=100)  # the same ids, another prompt
    assert tuple(b) == tuple(a) and b is not a and b.head == (7, 8)
    (c,) = memo.keys((7, 8), [(9, 1, 2)], bound=100)
    assert c.parent is b
    (d,) = memo.keys((7, 8), [(9, 1)], bound=8)  # the prompt's 8 is not below 8
    assert d is b and d.below is None
    (e,) = memo.keys((-1, 3), [(1,)], bound=100)
    assert e.below is None


def _cache_with(keys):
    cache = PrefixCache(1 << 30)
    layers = ((torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1)),)
    for k in keys:
        cache.put(k, KV(layers, 0), Block(8), None, None)
    return cache


def test_longest_kv_through_the_parent_equals_the_slicing_lookup():
    rng = np.random.default_rng(0)
    for _ in range(200):
        stored = [tuple(rng.integers(0, 3, size=int(rng.integers(1, 6))).tolist()) for _ in range(4)]
        cache = _cache_with(stored)
        key = tuple(rng.integers(0, 3, size=int(rng.integers(2, 7))).tolist())
        limit = int(rng.integers(1, len(key) + 1))
        hinted = Ids(key)
        hinted.parent = Ids(key[:-1])
        n, kv, found = cache.longest_kv(hinted, limit)
        assert (n, found) == cache.longest_kv(key, limit)[::2]
        assert (kv is None) == (n == 0)


def test_extension_groups_past_a_shared_head_equal_the_full_sort():
    rng = np.random.default_rng(1)
    head = tuple(range(50))
    for _ in range(100):
        tails = {tuple(rng.integers(0, 3, size=int(rng.integers(0, 5))).tolist()) for _ in range(12)}
        plain = [head + t for t in tails]
        tagged = []
        for k in plain:
            k = Ids(k)
            k.head = head
            tagged.append(k)
        assert extension_groups(tagged) == extension_groups(plain)
        tagged[0].head = tuple(head)  # an equal head, another object: the full sort
        assert extension_groups(tagged) == extension_groups(plain)


@pytest.fixture(scope="module")
def llm():
    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")


async def test_an_smc_run_continues_every_particle_from_its_parents_key(llm):
    """Each backend lookup for a continued context finds the parent's stored states by
    the parent's own key object, and the run's sequences equal those of a run whose
    keys carry no hints (the lookups slice)."""
    llm = llm.spawn()
    llm.set_prompt_from_str(("The function " * 40).strip())
    cache = llm.model.prefix_cache(None)
    found, hinted = [], []
    longest = type(cache).longest_kv

    def spy(self, key, limit):
        out = longest(self, key, limit)
        if getattr(key, "parent", None) is not None:
            hinted.append(key)
            found.append(out[2] is key.parent)
        return out

    sampler = direct_token_sampler(llm)
    type(cache).longest_kv = spy
    try:
        llm.model.clear_cache()
        with_hints = await sampler.smc(n_particles=6, ess_threshold=0.5, max_tokens=12, seed=3)
    finally:
        type(cache).longest_kv = longest
    assert len(hinted) >= 6 * 8 and all(found)

    plain_parent = Ids.parent
    llm.model.clear_cache()
    memo_keys = type(llm._context_keys).keys

    def unhinted(self, start, tails, bound):
        keys = memo_keys(self, start, tails, bound)
        for k in keys:
            k.parent = plain_parent
        return keys

    type(llm._context_keys).keys = unhinted
    try:
        without = await sampler.smc(n_particles=6, ess_threshold=0.5, max_tokens=12, seed=3)
    finally:
        type(llm._context_keys).keys = memo_keys
    assert with_hints.contexts == without.contexts
    np.testing.assert_allclose(with_hints.log_weights, without.log_weights, rtol=0, atol=1e-9)


async def _grow(llm, rng, contexts, steps):
    """Extend each context by one random vocabulary token per step (resampling
    between steps), scoring them all with `batch_score` at each step; yields each
    step's contexts and scores."""
    for _ in range(steps):
        contexts = [contexts[i] for i in rng.integers(0, len(contexts), size=len(contexts))]
        contexts = [c + [llm.vocab[int(rng.integers(0, len(llm.vocab)))]] for c in contexts]
        yield contexts, await llm.batch_score(contexts)


async def test_a_critics_scores_step_by_step_equal_a_fresh_views_to_the_bit(llm):
    """Scores kept from the latest calls and extended by one term are the very numbers
    a view with nothing kept computes from every prefix's row (`prefix`, `complete`,
    `score`); each step asks the backend for one row per distinct parent."""
    critic = llm.spawn()
    critic.set_prompt_from_str("A story about")
    rng = np.random.default_rng(4)
    critic._logprobs, asked = counting_calls(critic._logprobs)
    async for contexts, scores in _grow(critic, rng, [[] for _ in range(5)], 36):
        fresh = llm.spawn()
        fresh.set_prompt_from_str("A story about")
        np.testing.assert_array_equal(scores, await fresh.batch_score(contexts))
        np.testing.assert_array_equal(await critic.batch_prefix(contexts), await fresh.batch_prefix(contexts))
        np.testing.assert_array_equal(await critic.batch_complete(contexts), await fresh.batch_complete(contexts))
        ended = [c + [critic.eos] for c in contexts]
        np.testing.assert_array_equal(await critic.batch_score(ended), await fresh.batch_score(ended))
    # per step: rows of at most 5 parents (batch_score), none for repeated prefixes, and
    # at most 5 for the EOS terms (batch_complete, the ended contexts)
    assert len(asked) > 36 and max(asked[4:]) <= 5
    assert critic._context_tails._now  # past 31 tokens the contexts' ids came from the memo


async def test_kept_scores_follow_the_temperature(llm):
    critic = llm.spawn()
    contexts = [[critic.vocab[3]], [critic.vocab[3], critic.vocab[9]]]
    at_one = await critic.batch_prefix(contexts)
    critic.temperature = 0.5
    fresh = llm.spawn(temperature=0.5)
    np.testing.assert_array_equal(await critic.batch_prefix(contexts), await fresh.batch_prefix(contexts))
    assert not np.array_equal(at_one, await critic.batch_prefix(contexts))


async def test_a_copy_of_the_view_starts_without_the_kept_keys_and_scores(llm):
    view = llm.spawn()
    contexts = [[view.vocab[3], view.vocab[9]]]
    await view.batch_score(contexts)
    await view.batch_logw_next(contexts)
    state = view.__getstate__()
    assert state["_scored_keys"] is not view._scored_keys and not state["_scored_keys"]._now
    assert state["_context_keys"] is not view._context_keys and not state["_context_keys"]._now
    assert state["_scored_setting"] is None and state["_last_rows"]._block is None
    assert view._scored_keys._now and view._context_keys._now  # the view's own are kept


def test_context_tails_are_the_context_ids_and_read_only_the_new_token(llm):
    """Grown, resampled, repeated, edited and plain-bytes contexts: the memo's ids equal
    `context_ids`, errors included; a context grown from a kept one reads one token."""
    maps = llm.token_maps
    memo = ContextTails()
    memo.SHORT = 2  # every context of two tokens or more goes through the memo
    rng = np.random.default_rng(7)
    vocab = llm.vocab
    contexts = [[] for _ in range(6)]
    read = []

    def counted(context):
        read.append(len(context))
        return maps.context_ids(context)

    for step in range(40):
        contexts = [list(contexts[i]) for i in rng.integers(0, len(contexts), size=len(contexts))]
        for c in contexts:
            c.append(vocab[int(rng.integers(0, len(vocab)))])
        if step % 7 == 3:  # a token replaced by another object: read whole again
            contexts[0][0] = vocab[int(rng.integers(0, len(vocab)))]
        if step % 9 == 4:  # plain bytes for a token: the first token with those bytes
            contexts[1][-1] = bytes(contexts[1][-1])
            contexts[2][0] = bytes(contexts[2][0])
        read.clear()
        tails = memo.tails(counted, contexts)
        assert tails == [tuple(maps.context_ids(c)) for c in contexts]
        if step > 1 and step % 7 != 3 and step % 9 != 4:
            assert max(read) == 1  # every context continued a kept one
    eos = llm.eos
    with pytest.raises(ValueError) as memo_error:
        memo.tails(maps.context_ids, [contexts[3] + [eos]])
    with pytest.raises(ValueError) as plain_error:
        maps.context_ids(contexts[3] + [eos])
    assert str(memo_error.value) == str(plain_error.value)


def test_context_tails_keep_two_generations_within_their_budget(llm):
    vocab = llm.vocab
    memo = ContextTails()
    memo.KEPT_IDS = 50
    c = []
    for i in range(200):
        c = c + [vocab[i % 97 + 1]]
        assert memo.tails(llm.token_maps.context_ids, [c]) == [tuple(llm.token_maps.context_ids(c))]
    kept = sum(len(t) for d in (memo._now, memo._before) for m in d.values() for t in m.values())
    assert kept <= 2 * (50 + 200)


def test_short_contexts_are_read_whole_and_not_kept(llm):
    memo = ContextTails()
    contexts = [[llm.vocab[i + 1] for i in range(n)] for n in (0, 1, 5, ContextTails.SHORT - 1)]
    assert memo.tails(llm.token_maps.context_ids, contexts) == [
        tuple(llm.token_maps.context_ids(c)) for c in contexts
    ]
    assert not memo._now and not memo._before
