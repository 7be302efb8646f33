"""Bounded caches: recognizer states keyed by context (extended one token at a time),
and rows keyed by state; both are `LRU`s bounded by entries."""

from __future__ import annotations

from numbers import Real
from typing import Any, Callable, Generic, Hashable, Sequence, TypeVar

from genlm.control._lru import LRU

S = TypeVar("S")

_MISS = object()


class PrefixStateCache(Generic[S]):
    """Maps a context to the state a recognizer reaches after reading it.

    `get(ctx)` looks up `ctx`, then its shorter prefixes from the longest down, and
    applies `step` for the missing tokens only, caching each state it computes; so a
    call after `get(ctx[:-1])` costs one `step`. A `None` state means dead: every
    extension of a dead context is dead without stepping. At most `size` states are
    kept, the least recently used are evicted first.

    Args:
        root: the state of the empty context (always kept).
        step: `step(state, token) -> state | None`.
        size: the maximum number of cached non-root states.

    Raises:
        TypeError: `size` is not a number (a bool included).
        ValueError: `size` is below 1 or NaN.
    """

    def __init__(self, root: S, step: Callable[[S, Any], S | None], size: int = 16384):
        if isinstance(size, bool) or not isinstance(size, Real):
            raise TypeError(f"cache size must be a number, got {size!r}")
        if not size >= 1:
            raise ValueError(f"cache size must be at least 1, got {size!r}")
        self.root = root
        self.step = step
        self.size = size
        self._states: LRU[tuple, S | None] = LRU(size)

    def __len__(self) -> int:
        return len(self._states)

    def get(self, context: Sequence[Any]) -> S | None:
        key = tuple(context)
        states = self._states
        n = len(key)
        k, state = n, None
        while k > 0:
            hit = states.get(key[:k] if k < n else key, _MISS)
            if hit is not _MISS:
                state = hit
                break
            k -= 1
        if k == 0:
            state = self.root
        while k < n and state is not None:
            state = self.step(state, key[k])
            k += 1
            states.put(key[:k], state)
        if k < n:  # dead before the end: the whole context is dead
            states.put(key, None)
        return state

    def clear(self) -> None:
        self._states.clear()


class RowCache(Generic[S]):
    """At most `size` values keyed by a hashable state, made by `make(state)` on a
    miss; the least recently used are evicted first.

    Args:
        make: `make(state) -> value`.
        size: the maximum number of values kept.
    """

    def __init__(self, make: Callable[[Any], S], size: int):
        self.make = make
        self.size = size
        self._items: LRU[Hashable, S] = LRU(size)

    def __len__(self) -> int:
        return len(self._items)

    def peek(self, state: Hashable) -> S | None:
        """The value kept for `state`, or None (nothing is made or reordered)."""
        return self._items.peek(state)

    def get(self, state: Hashable) -> S:
        """The value for `state`, made and kept on a miss (marks it as used)."""
        return self._items.get_or_make(state, self.make)

    def put(self, state: Hashable, value: S) -> None:
        """Keep `value` for `state`, made elsewhere exactly as `make(state)` would make it."""
        self._items.put(state, value)


__all__ = ["PrefixStateCache", "RowCache"]
