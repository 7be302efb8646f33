"""One least-recently-used map for every bounded cache of the package.

An `LRU` keeps its keys in order of use, the least recently used first. It is
bounded either by its number of entries (`max_entries`) or by bytes
(`max_bytes`): in the second case the owner says what each entry costs with
`charge(n)` (costs may be shared between entries, so the map does not size values
itself) and releases an evicted entry's cost in `on_evict`. After every `put` the
map evicts from the least recently used end while it is over its bound:

    while len(self) > max_entries            (entries)
    while self.nbytes > max_bytes and self   (bytes)
"""

from __future__ import annotations

from collections import OrderedDict
from numbers import Real
from typing import Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISS = object()


class LRU(Generic[K, V]):
    """A map that evicts its least recently used entries beyond a bound.

    Reading with `get` (or `get_or_make`) marks a key as used; `peek`, `in` and
    `[]` do not. `put` marks the key as used, then evicts.

    Args:
        max_entries: the most entries kept (None: no bound on the count).
        max_bytes: the most bytes kept, as charged by the owner (None: no bound).
        on_evict: `on_evict(key, value)`, called for each entry the bound evicts
            (not for `pop` or `clear`).

    Raises:
        ValueError: a bound that is not a non-negative number, or both bounds.
    """

    __slots__ = ("_items", "max_entries", "max_bytes", "nbytes", "on_evict")

    def __init__(
        self,
        max_entries: int | None = None,
        *,
        max_bytes: int | None = None,
        on_evict: Callable[[K, V], None] | None = None,
    ):
        for name, bound in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, Real) or not bound >= 0):
                raise ValueError(f"{name} must be a non-negative number or None, got {bound!r}")
        if max_entries is not None and max_bytes is not None:
            raise ValueError("an LRU is bounded by entries or by bytes, not both")
        self._items: OrderedDict[K, V] = OrderedDict()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.on_evict = on_evict

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: K) -> bool:
        return key in self._items

    def __getitem__(self, key: K) -> V:
        """The value for `key` (not marked as used); KeyError when absent."""
        return self._items[key]

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first."""
        return iter(self._items)

    def keys(self) -> list[K]:
        """The keys, least recently used first."""
        return list(self._items)

    def peek(self, key: K, default=None):
        """The value for `key`, or `default` (the order is left as it is)."""
        return self._items.get(key, default)

    def get(self, key: K, default=None):
        """The value for `key` (marked as used), or `default`."""
        value = self._items.get(key, _MISS)
        if value is _MISS:
            return default
        self._items.move_to_end(key)
        return value

    def get_or_make(self, key: K, make: Callable[[K], V]) -> V:
        """The value for `key` (marked as used); on a miss `make(key)`, kept, then evict."""
        value = self._items.get(key, _MISS)
        if value is _MISS:
            value = self._items[key] = make(key)
            self.evict()
        else:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key` as the most recently used entry, then evict."""
        self._items[key] = value
        self._items.move_to_end(key)
        self.evict()

    def touch(self, key: K) -> None:
        """Mark `key` as the most recently used."""
        self._items.move_to_end(key)

    def demote(self, key: K) -> None:
        """Make `key` the first entry to evict (no-op when absent)."""
        if key in self._items:
            self._items.move_to_end(key, last=False)

    def pop(self, key: K, default=None):
        """Remove `key` and return its value (`default` when absent); no `on_evict`."""
        return self._items.pop(key, default)

    def charge(self, nbytes: int) -> None:
        """Add `nbytes` (negative to release) to the bytes the entries hold."""
        self.nbytes += nbytes

    def evict(self) -> None:
        """Drop least recently used entries while the map is over its bound."""
        items, on_evict = self._items, self.on_evict
        if self.max_entries is not None:
            while len(items) > self.max_entries:
                key, value = items.popitem(last=False)
                if on_evict is not None:
                    on_evict(key, value)
        elif self.max_bytes is not None:
            while self.nbytes > self.max_bytes and items:
                key, value = items.popitem(last=False)
                if on_evict is not None:
                    on_evict(key, value)

    def items(self) -> list[tuple[K, V]]:
        """The entries, least recently used first."""
        return list(self._items.items())

    def values(self) -> list[V]:
        """The values, least recently used first."""
        return list(self._items.values())

    def clear(self) -> None:
        """Drop every entry (no `on_evict`; the owner resets what it charged)."""
        self._items.clear()


__all__ = ["LRU"]
