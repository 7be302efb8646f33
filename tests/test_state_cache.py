"""The bounded caches behind the constraint potentials."""

from genlm.control._state_cache import PrefixStateCache, RowCache


def test_row_cache_makes_once_evicts_least_recently_used_and_peeks_without_making():
    made = []

    def make(state):
        made.append(state)
        return state * 10

    cache = RowCache(make, size=2)
    assert cache.peek("a") is None and made == []
    assert cache.get(1) == 10 and cache.get(2) == 20 and cache.get(1) == 10
    assert made == [1, 2]
    assert cache.peek(2) == 20  # no reordering: 2 stays the least recently used
    assert cache.get(3) == 30
    assert len(cache) == 2 and cache.peek(2) is None and cache.peek(1) == 10
    assert cache.get(2) == 20 and made == [1, 2, 3, 2]


def test_prefix_state_cache_steps_only_the_missing_tokens_and_keeps_dead_contexts_dead():
    steps = []

    def step(state, token):
        steps.append(token)
        return None if token == "x" else state + token

    cache = PrefixStateCache("", step, size=8)
    assert cache.get(list("ab")) == "ab" and steps == ["a", "b"]
    assert cache.get(list("abc")) == "abc" and steps == ["a", "b", "c"]
    assert cache.get(list("axb")) is None and steps == ["a", "b", "c", "x"]
    assert cache.get(list("axbc")) is None and steps == ["a", "b", "c", "x"]
