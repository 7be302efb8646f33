"""`CachedTransformer`: rows equal the uncached forward; the cache stays within its budget."""

import asyncio
import inspect
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from genlm.backend.llm import AsyncTransformer  # noqa: E402

from genlm.control import PromptedLLM  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.lm._hf_batch import (  # noqa: E402
    DEFAULT_CACHE_BYTES,
    MIN_DEFAULT_CACHE_BYTES,
    CachedTransformer,
    default_cache_bytes,
    extension_groups,
    hand_over,
    parameter_bytes,
)
from genlm.control.lm._kv_cache import KV, Block, Ids, PrefixCache, id_keys  # noqa: E402

ATOL = 2e-4


@pytest.fixture(scope="module")
def hf():
    backend = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf").model
    assert isinstance(backend, CachedTransformer) and isinstance(backend, AsyncTransformer)
    return backend.model, backend.tokenizer


def fresh(hf, **kwargs) -> CachedTransformer:
    return CachedTransformer(hf[0], hf[1], **kwargs)


def reference(model, ids) -> torch.Tensor:
    """`log_softmax` of the last logits of a plain forward over `ids` (no cache, no batch)."""
    with torch.no_grad():
        logits = model(torch.tensor([list(ids)])).logits[0, -1]
    return torch.log_softmax(logits.float(), dim=-1)


def assert_rows(lm: CachedTransformer, keys, rows) -> None:
    assert rows.shape == (len(keys), lm.model.config.vocab_size)
    for key, row in zip(keys, rows):
        torch.testing.assert_close(row, reference(lm.model, key), atol=ATOL, rtol=0)


def test_extension_groups_partition_into_prefix_chains():
    rng = np.random.default_rng(0)
    keys = {tuple(rng.integers(0, 3, size=int(rng.integers(1, 6))).tolist()) for _ in range(60)}
    groups = extension_groups(list(keys))
    assert sorted(k for g in groups for k in g) == sorted(keys)
    heads = [g[0] for g in groups]
    for g in groups:
        assert all(g[0][: len(k)] == k for k in g)
        assert [len(k) for k in g] == sorted((len(k) for k in g), reverse=True)
    for a in heads:  # no head is a proper prefix of another key
        assert not any(len(b) > len(a) and b[: len(a)] == a for b in keys)


def test_extension_groups_examples():
    assert extension_groups([(1,), (1, 2), (1, 2, 3), (1, 3)]) == [[(1, 3)], [(1, 2, 3), (1, 2), (1,)]]
    assert extension_groups([(5,)]) == [[(5,)]]


async def test_rows_equal_reference_for_steps_prefixes_and_mixed_lengths(hf):
    lm = fresh(hf)
    prompt = tuple(hf[1].encode("The module"))
    first = [prompt + (t,) for t in (11, 12, 13)]
    assert_rows(lm, first, await lm.batch_next_token_logprobs([list(k) for k in first]))
    # One step of every sequence: equal-length pasts, one new token each.
    step = [k + (t,) for k in first for t in (40, 41)]
    assert_rows(lm, step, await lm.batch_next_token_logprobs(step))
    # Mixed: pasts of unequal length, several new tokens, and prefixes of other keys.
    mixed = [step[0] + (7, 8, 9), step[0] + (7,), first[1] + (99,), prompt + (3, 4, 5, 6, 7, 8), prompt[:1]]
    assert_rows(lm, mixed, await lm.batch_next_token_logprobs(mixed))
    # Served again from the cache, duplicates included.
    again = [mixed[2], mixed[2], step[3]]
    assert_rows(lm, again, await lm.batch_next_token_logprobs(again))


async def test_pasts_from_several_forwards_stack_in_any_order(hf):
    lm = fresh(hf)
    p = tuple(hf[1].encode("Each value"))
    a, b = [p + (1,), p + (2,)], [p + (3,), p + (4,)]
    await lm.batch_next_token_logprobs(a)
    await lm.batch_next_token_logprobs(b)
    keys = [b[1] + (5,), a[0] + (5,), b[0] + (7,), a[1] + (6,), a[1] + (8,)]
    assert_rows(lm, keys, await lm.batch_next_token_logprobs(keys))
    assert lm.forwards == 3


async def test_rows_at_positions_are_the_ordered_rows_read_in_place(hf):
    """After a resampling the forward's rows follow its key/value states, not the keys'
    order: `batch_next_token_logprobs_at` answers the forward's own block and where each
    key's row lies in it (no copy), and those rows are `batch_next_token_logprobs`'s,
    bit for bit; concurrent callers each get their own positions in the shared block."""
    lm, twin = fresh(hf), fresh(hf)
    p = tuple(hf[1].encode("Each value"))
    parents = [p + (t,) for t in (1, 2, 3, 4)]
    for m in (lm, twin):
        await m.batch_next_token_logprobs(parents)
    keys = [parents[2] + (5,), parents[0] + (6,), parents[3] + (7,), parents[0] + (8,)]  # resampled order
    block, at = await lm.batch_next_token_logprobs_at(keys)
    want = await twin.batch_next_token_logprobs(keys)
    assert at is not None and sorted(at.tolist()) == list(range(len(keys)))
    assert at.tolist() != list(range(len(keys)))  # the forward's order differs from the keys'
    assert torch.equal(block[torch.as_tensor(at)], want)
    assert_rows(lm, keys, block[torch.as_tensor(at)])
    # rows already in the keys' order come back as they are (positions None)
    again, none = await lm.batch_next_token_logprobs_at([keys[i] for i in np.argsort(at)])
    assert none is None and again.data_ptr() == block.data_ptr()
    # two callers in one pass: one forward, each caller's positions into the same block
    more = [[k + (9,) for k in keys[:2]], [k + (9,) for k in keys[2:]]]
    (b1, at1), (b2, at2) = await asyncio.gather(*(lm.batch_next_token_logprobs_at(m) for m in more))
    assert b1 is b2 and lm.forwards == 3
    wants = await asyncio.gather(*(twin.batch_next_token_logprobs(m) for m in more))  # the same batching
    for want_m, at_m in zip(wants, (at1, at2)):
        assert at_m is not None and torch.equal(b1[torch.as_tensor(at_m)], want_m)


async def test_sync_forms_and_cache_kv(hf):
    lm = fresh(hf)
    ids = hf[1].encode("Return the value")
    lm.cache_kv(ids)
    torch.testing.assert_close(lm.next_token_logprobs_sync(ids + [5]), reference(lm.model, ids + [5]), atol=ATOL, rtol=0)
    rows = lm.batch_next_token_logprobs_sync([ids, ids + [5, 6]])
    assert_rows(lm, [ids, ids + [5, 6]], rows)


async def test_concurrent_calls_share_one_forward(hf):
    lm = fresh(hf)
    prompt = hf[1].encode("A list")
    rows = await asyncio.gather(*(lm.next_token_logprobs(prompt + [t]) for t in range(6)))
    assert lm.forwards == 1
    assert_rows(lm, [prompt + [t] for t in range(6)], torch.stack(rows))


async def test_each_step_runs_only_the_new_token(hf):
    lm = fresh(hf)
    seqs = [tuple(hf[1].encode("x ="))] * 4
    seen = []
    inner = lm.model.forward

    def forward(input_ids, **kwargs):
        seen.append(tuple(input_ids.shape))
        return inner(input_ids, **kwargs)

    lm.model.forward = forward
    try:
        for t in range(5):
            seqs = [s + (int(t + i),) for i, s in enumerate(seqs)]
            await lm.batch_next_token_logprobs(seqs)
    finally:
        del lm.model.forward
    assert seen[0] == (4, len(seqs[0]) - 4)
    assert seen[1:] == [(4, 1)] * 4


async def test_continuing_the_latest_rows_reuses_their_cache_and_older_states_stay_exact(hf):
    lm = fresh(hf)
    prompt = tuple(hf[1].encode("def f"))
    seqs = [prompt + (20 + i,) for i in range(3)]
    await lm.batch_next_token_logprobs(seqs)
    older = list(seqs)
    objects = []
    inner = lm.model.forward

    def forward(input_ids, **kwargs):
        if "position_ids" in kwargs:  # the backend's forwards, not the reference's
            objects.append(kwargs.get(lm._cache_arg))
        return inner(input_ids, **kwargs)

    lm.model.forward = forward
    try:
        for t in range(3):  # the same rows, in order: the cache object is passed on
            seqs = [s + (30 + t,) for s in seqs]
            assert_rows(lm, seqs, await lm.batch_next_token_logprobs(seqs))
        # Branching from states of an earlier step builds a new cache from them.
        branch = [older[2] + (7,), older[0] + (8,)]
        assert_rows(lm, branch, await lm.batch_next_token_logprobs(branch))
    finally:
        del lm.model.forward
    assert objects[0] is objects[1] is objects[2]
    assert objects[3] is not objects[2]


async def test_long_resampled_run_stays_within_budget_and_exact(hf):
    budget = 2_000_000
    lm = fresh(hf, cache_bytes=budget)
    widths = []
    inner = lm.model.forward

    def forward(input_ids, **kwargs):
        if "position_ids" in kwargs:  # the cached path's forwards, not the reference's
            widths.append(input_ids.shape[1])
        return inner(input_ids, **kwargs)

    lm.model.forward = forward
    rng = np.random.default_rng(1)
    seqs = [tuple(hf[1].encode("Parse the"))] * 8
    peak_entries = peak_bytes = 0
    try:
        for step in range(60):
            rows = await lm.batch_next_token_logprobs(seqs)
            if step % 20 == 19:
                assert_rows(lm, seqs, rows)
            cache = lm.prefix_cache()
            peak_entries, peak_bytes = max(peak_entries, len(cache)), max(peak_bytes, cache.nbytes)
            ancestors = rng.integers(0, len(seqs), size=len(seqs))
            toks = torch.multinomial(rows.exp(), 1, generator=torch.Generator().manual_seed(step)).ravel()
            seqs = [seqs[a] + (int(toks[a]),) for a in ancestors]
    finally:
        del lm.model.forward
    assert peak_bytes <= budget
    assert peak_entries < 60 * 8 / 2  # old steps were evicted
    assert widths[1:] == [1] * 59  # every step ran only the new token of each sequence


async def test_zero_budget_and_cleared_states_give_the_same_rows(hf):
    for lm in (fresh(hf, cache_bytes=0), fresh(hf)):
        keys = [tuple(hf[1].encode("It is")) + (t,) for t in (1, 2)]
        await lm.batch_next_token_logprobs(keys)
        lm.clear_kv_cache()
        longer = [k + (9,) for k in keys] + keys
        assert_rows(lm, longer, await lm.batch_next_token_logprobs(longer))
        lm.clear_cache()
        assert len(lm.prefix_cache()) == 0


async def test_bad_arguments(hf):
    lm = fresh(hf)
    with pytest.raises(ValueError, match="must not be empty"):
        await lm.next_token_logprobs([])
    with pytest.raises(ValueError, match="batch_size"):
        fresh(hf, batch_size=0)
    with pytest.raises(ValueError, match="cache_bytes"):
        fresh(hf, cache_bytes=-1)
    with pytest.raises(ValueError, match="cache_bytes"):
        PrefixCache(1.5)


async def test_batch_size_splits_forwards(hf):
    lm = fresh(hf, batch_size=2)
    keys = [tuple(hf[1].encode("Five")) + (t,) for t in range(5)]
    assert_rows(lm, keys, await lm.batch_next_token_logprobs(keys))
    assert lm.forwards == 3


def _sized(n_params: int, dtype=torch.float32) -> torch.nn.Module:
    model = torch.nn.Module()
    model.weight = torch.nn.Parameter(torch.empty(n_params, dtype=dtype, device="meta"), requires_grad=False)
    return model


@pytest.mark.parametrize(
    "n_params, dtype, expected",
    [
        (1_000_000, torch.float32, MIN_DEFAULT_CACHE_BYTES),  # ¼ of 4 MB: the floor
        (200_000_000, torch.float32, 200_000_000),  # ¼ of 800 MB
        (100_000_000, torch.float16, 50_000_000),  # ¼ of 200 MB
        (8_000_000_000, torch.float16, DEFAULT_CACHE_BYTES),  # ¼ of 16 GB: the 1 GiB ceiling
    ],
)
def test_the_default_cache_budget_is_a_quarter_of_the_weights_clipped(n_params, dtype, expected):
    assert parameter_bytes(_sized(n_params, dtype)) == n_params * (4 if dtype == torch.float32 else 2)
    assert default_cache_bytes(_sized(n_params, dtype)) == expected


def test_the_embedded_model_gets_the_floor_unless_told_otherwise(hf):
    assert parameter_bytes(hf[0]) < 4 * MIN_DEFAULT_CACHE_BYTES
    assert fresh(hf).cache_bytes == MIN_DEFAULT_CACHE_BYTES
    assert fresh(hf).prefix_cache().max_bytes == MIN_DEFAULT_CACHE_BYTES
    assert fresh(hf, cache_bytes=1 << 30).cache_bytes == 1 << 30


def test_on_cuda_the_default_takes_at_most_a_quarter_of_the_free_memory(monkeypatch):
    model = _sized(1_000_000_000)  # ¼ of 4 GB: 1 GB
    model.device = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (400_000_000, 80_000_000_000))
    assert default_cache_bytes(model) == 100_000_000
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40_000_000_000, 80_000_000_000))
    assert default_cache_bytes(model) == 1_000_000_000


def test_ids_keys_equal_and_hash_as_tuples_and_hash_once():
    import pickle

    k = Ids((5, 300, 70000))
    assert k == (5, 300, 70000) and hash(k) == hash((5, 300, 70000))
    assert {(5, 300, 70000): "t"}[k] == "t" and {k: "i"}[(5, 300, 70000)] == "i"
    assert k._hash == hash((5, 300, 70000))  # kept after the first hash
    k._hash = 123  # read from there, not computed again
    assert hash(k) == 123
    back = pickle.loads(pickle.dumps(k))
    assert type(back) is Ids and back == k and not hasattr(back, "_hash")  # no hash travels
    assert hash(back) == hash((5, 300, 70000))


def test_keys_pass_ids_through_and_convert_anything_else():
    k = Ids((1, 2, 3))
    assert id_keys([k])[0] is k
    got = id_keys([np.array([4, 5]), [6, np.int64(7)], (8,)])
    assert got == [(4, 5), (6, 7), (8,)]
    assert all(type(g) is Ids and all(type(i) is int for i in g) for g in got)
    with pytest.raises(ValueError, match="empty"):
        id_keys([Ids(())])


def test_longest_kv_returns_the_stored_key_and_demoting_it_evicts_it_first():
    cache = PrefixCache(10**6)
    layers = ((torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 2, 1)),)
    for key in [Ids((1, 2)), Ids((3, 4)), Ids((5, 6))]:
        cache.put(key, KV(layers, 0), Block(8), None, None)
    stored = cache._entries.keys()[1]
    n, kv, key = cache.longest_kv((3, 4, 9), 2)  # a plain tuple query finds the Ids entry
    assert (n, key) == (2, (3, 4)) and key is stored and kv.layers is layers
    assert cache.longest_kv((7, 8, 9), 2) == (0, None, ())
    cache.demote(key)
    assert cache._entries.keys()[0] is stored


def spied_llm(hf) -> tuple[PromptedLLM, list]:
    """A `PromptedLLM` on a fresh backend, and the list its backend's queries go to."""
    llm = PromptedLLM(fresh(hf), eos_byte_strings=[b"\n"])
    llm.prompt_ids = list(hf[1].encode("def f"))
    seen = []
    inner = llm.model.batch_next_token_logprobs_at

    async def spy(token_ids_list, **kw):
        seen.append(list(token_ids_list))
        return await inner(token_ids_list, **kw)

    llm.model.batch_next_token_logprobs_at = spy
    return llm, seen


async def test_a_prompted_llm_hands_our_backend_ids_keys_and_others_lists(hf):
    llm, seen = spied_llm(hf)
    contexts = [[llm.vocab[5]], [llm.vocab[5], llm.vocab[9]]]
    rows = await llm.batch_logw_next(contexts)
    assert all(type(k) is Ids for k in seen[0])
    # the same rows as a query in plain lists (the keys find the same cache entries)
    plain = await llm.model.batch_next_token_logprobs([list(k) for k in seen[0]])
    idx = llm.token_maps.vocab_idxs
    for row, ref in zip(rows, plain):
        np.testing.assert_array_equal(np.asarray(row.weights[:-1]), ref[idx].numpy())

    class Lists:  # a backend that does not read `Ids` gets lists, as genlm-backend's do
        def __init__(self, model):
            self.model, self.got = model, []

        def __getattr__(self, name):
            if name == "reads_ids_keys":  # not declared, as by genlm-backend's backends
                raise AttributeError(name)
            return getattr(self.model, name)

        async def batch_next_token_logprobs(self, token_ids_list, **kw):
            self.got.append(token_ids_list)
            return await self.model.batch_next_token_logprobs(token_ids_list, **kw)

    other = Lists(fresh(hf))
    assert not getattr(other, "reads_ids_keys", False)
    other.batch_next_token_logprobs_at = None
    llm2 = PromptedLLM(other, eos_byte_strings=[b"\n"])
    llm2.prompt_ids = llm.prompt_ids
    rows2 = await llm2.batch_logw_next(contexts)
    assert all(type(k) is list for k in other.got[0])
    for a, b in zip(rows, rows2):
        np.testing.assert_array_equal(np.asarray(a.weights), np.asarray(b.weights))


async def test_handed_over_states_are_shared_never_written_and_give_the_copied_cache_rows(hf):
    from transformers import DynamicCache

    model, tok = hf
    ids = torch.tensor([tok.encode("def f(x):")] * 3)
    with torch.no_grad():
        first = model(ids, use_cache=True)
    states = first.past_key_values if getattr(first, "cache", None) is None else first.cache
    pasts = [(layer.keys.clone(), layer.values.clone()) for layer in states.layers]
    before = [(k.clone(), v.clone()) for k, v in pasts]
    shared = hand_over(pasts)
    for layer, (k, v) in zip(shared.layers, pasts):
        assert layer.keys is k and layer.values is v  # no copy
    step = torch.tensor([[5], [6], [7]])
    arg = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(step, use_cache=True, **{arg: shared})
        ref = model(step, use_cache=True, **{arg: DynamicCache(list(before))})
    torch.testing.assert_close(out.logits, ref.logits, atol=0, rtol=0)
    for (k, v), (k0, v0) in zip(pasts, before):  # the forward extended new tensors
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert shared.layers[0].keys.shape[2] == pasts[0][0].shape[2] + 1


async def test_keys_are_marked_checked_only_when_the_prompt_lies_in_the_vocabulary(hf):
    llm, seen = spied_llm(hf)
    await llm.batch_logw_next([[llm.vocab[5]]])
    assert seen[-1][0].below == len(llm.token_maps.decode)
    llm.prompt_ids.append(len(llm.token_maps.decode))  # written in place, past the vocabulary
    with pytest.raises(IndexError):  # the model refuses it, as before
        await llm.batch_logw_next([[llm.vocab[6]]])
    assert seen[-1][0].below is None
