"""The one LRU type: eviction order and bounds by entries and by bytes, against a
reference model, and the caches built on it keep their bounds."""

from collections import OrderedDict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genlm.control._lru import LRU
from genlm.control._state_cache import PrefixStateCache
from genlm.control.lm._kv_cache import Block, PrefixCache


def test_entries_bound_evicts_the_least_recently_used_first():
    evicted = []
    lru = LRU(2, on_evict=lambda k, v: evicted.append((k, v)))
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "b" is now the least recently used
    assert lru.peek("b") == 2 and "b" in lru and lru["b"] == 2  # none of these reorders
    lru.put("c", 3)
    assert evicted == [("b", 2)] and lru.keys() == ["a", "c"]
    lru.demote("c")
    lru.put("d", 4)
    assert evicted == [("b", 2), ("c", 3)] and lru.keys() == ["a", "d"]
    assert lru.get("zz", "none") == "none" and lru.pop("a") == 1 and evicted[-1] == ("c", 3)
    made = []
    assert lru.get_or_make("e", lambda k: made.append(k) or k * 2) == "ee"
    assert lru.get_or_make("e", lambda k: made.append(k) or k * 3) == "ee" and made == ["e"]
    lru.clear()
    assert len(lru) == 0 and evicted[-1] == ("c", 3)


def test_zero_entries_keeps_nothing_but_returns_the_made_value():
    lru = LRU(0)
    assert lru.get_or_make(1, lambda k: "one") == "one" and len(lru) == 0


def test_bytes_bound_evicts_while_the_charged_bytes_exceed_it():
    lru = LRU(max_bytes=10)

    def drop(key, value):
        lru.charge(-value)

    lru.on_evict = drop
    for key, size in [("a", 4), ("b", 4), ("c", 4)]:
        lru.charge(size)
        lru.put(key, size)
    assert lru.keys() == ["b", "c"] and lru.nbytes == 8
    lru.get("b")
    lru.charge(11)
    lru.put("big", 11)  # over the budget alone: every entry goes, itself last
    assert lru.keys() == [] and lru.nbytes == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_entries": -1}, "max_entries must be a non-negative number"),
        ({"max_entries": True}, "max_entries must be"),
        ({"max_entries": float("nan")}, "max_entries must be"),
        ({"max_bytes": "10"}, "max_bytes must be"),
        ({"max_entries": 1, "max_bytes": 1}, "entries or by bytes, not both"),
    ],
)
def test_bad_bounds(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LRU(**kwargs)


ops = st.lists(
    st.tuples(st.sampled_from(["put", "get", "peek", "make", "demote", "pop"]), st.integers(0, 6)),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4), ops)
def test_entries_lru_equals_a_reference_ordered_dict(size, script):
    lru, ref, evicted, ref_evicted = LRU(size, on_evict=lambda k, v: evicted.append(k)), OrderedDict(), [], []

    def ref_trim():
        while len(ref) > size:
            ref_evicted.append(ref.popitem(last=False)[0])

    for i, (op, key) in enumerate(script):
        if op == "put":
            lru.put(key, i)
            ref[key] = i
            ref.move_to_end(key)
            ref_trim()
        elif op == "get":
            want = ref.get(key)
            if key in ref:
                ref.move_to_end(key)
            assert lru.get(key) == want
        elif op == "peek":
            assert lru.peek(key) == ref.get(key)
        elif op == "make":
            if key in ref:
                ref.move_to_end(key)
                want = ref[key]
            else:
                want = ref[key] = -key
                ref_trim()
            assert lru.get_or_make(key, lambda k: -k) == want
        elif op == "demote":
            lru.demote(key)
            if key in ref:
                ref.move_to_end(key, last=False)
        else:
            assert lru.pop(key) == ref.pop(key, None)
        assert lru.items() == list(ref.items()) and evicted == ref_evicted


def test_prefix_state_cache_bound_and_order():
    cache = PrefixStateCache("", lambda s, t: s + t, size=3)
    cache.get(list("abcd"))  # keeps a, ab, abc, abcd: "a" evicted
    assert len(cache) == 3 and cache._states.keys() == [tuple("ab"), tuple("abc"), tuple("abcd")]
    cache.get(list("ab"))
    cache.get(list("x"))
    assert cache._states.keys() == [tuple("abcd"), tuple("ab"), ("x",)]
    for bad in (0, -2, float("nan")):
        with pytest.raises(ValueError, match="cache size must be at least 1"):
            PrefixStateCache("", lambda s, t: s + t, size=bad)
    for bad in (True, "3", None):
        with pytest.raises(TypeError, match="cache size must be a number"):
            PrefixStateCache("", lambda s, t: s + t, size=bad)


def test_kv_prefix_cache_counts_a_shared_block_once_and_evicts_by_bytes():
    cache = PrefixCache(100)
    shared = Block(60)
    row = torch.zeros(3)
    cache.put((1,), None, None, row, shared)
    cache.put((2,), None, None, row, shared)
    assert cache.nbytes == 60 and len(cache) == 2
    cache.put((3,), None, None, row, Block(30))
    assert cache.nbytes == 90
    cache.demote((3,))
    cache.put((4,), None, None, row, Block(20))  # 110 > 100: (3,) goes first (demoted)
    assert cache.nbytes == 80 and cache._entries.keys() == [(1,), (2,), (4,)]
    assert cache.row((1,)) is row and cache._entries.keys() == [(2,), (4,), (1,)]
    cache.put((5,), None, None, row, Block(50))  # 130: dropping (2,) frees nothing (the
    # shared block stays for (1,)), (4,) frees 20, (1,) the shared 60
    assert cache.nbytes == 50 and cache._entries.keys() == [(5,)]
    cache.clear()
    assert cache.nbytes == 0 and len(cache) == 0 and shared.refs == 0
