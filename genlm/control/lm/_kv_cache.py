"""A byte-bounded LRU cache of per-sequence key/value states and next-token rows.

Each entry is keyed by a token-id tuple and holds the model's key/value states
for exactly those tokens (a row of a forward's per-layer `(keys, values)`
tensors, see `KV`) and/or the next-token log probabilities after them.
Entries made by one forward are views of that forward's tensors; a `Block`
counts the bytes of such a tensor once, for as long as any entry uses it, so the
budget bounds the memory the cache keeps alive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from genlm.control._lru import LRU


class Ids(tuple):
    """Token ids as a cache key that computes its hash once.

    A key is hashed many times per query (the caller's dedup and memo, the prefix
    cache's lookups, its LRU order), and a tuple hashes all its items every time:
    with a prompt of 2,000 tokens that is about 6 µs per hash, per context, per step.
    An `Ids` keeps its first hash. It is equal to, and hashes as, the plain tuple of
    the same ids, so either finds the other's entries.

    Attributes:
        below: where set, every id has been checked to lie in `[0, below)` by the
            key's maker (a backend then need not read the key again to check them).
        parent: where set, the key of the same ids less the last one, as its maker
            holds it (`ContextKeys`): the key a backend looks up to continue this one
            (its cached states, its live request), found without slicing, hashing
            and comparing the whole sequence again. A hint only: it is cleared when
            a child is made from the parent, so a chain of keys never stays alive.
        head: where set, a tuple this key begins with (its maker's prompt, one object
            for all its keys): keys with the same head object are ordered by what
            follows it (`extension_groups`).
        logp: where set, the log probability of the ids after `head` under the
            `PromptedLLM` view that scored them (its keys only, see `_batch_logp`).
    """

    below: int | None = None
    parent: "Ids | None" = None
    head: tuple | None = None
    logp: float | None = None

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            h = self._hash = tuple.__hash__(self)
            return h

    def __reduce__(self):
        return (Ids, (tuple(self),))


def parent_key(key: tuple) -> tuple:
    """`key[:-1]`: the key's `parent` where its maker recorded it (the same object the
    caches hold: looked up by identity), else a slice."""
    parent = getattr(key, "parent", None)
    return key[:-1] if parent is None else parent


def id_keys(token_ids_list: Any) -> list[Ids]:
    """The queries as `Ids` keys: as they are where they already are `Ids` (whose
    items are ints: `PromptedLLM` builds its keys so), else converted item by item.

    Raises:
        ValueError: an empty query.
    """
    keys = []
    for ids in token_ids_list:
        key = ids if type(ids) is Ids else Ids(map(int, ids))
        if not key:
            raise ValueError("Token ids must not be empty")
        keys.append(key)
    return keys


class KV(NamedTuple):
    """The key/value states of one sequence: row `row` of a forward's states.

    Attributes:
        layers: per layer, `(keys, values)` of shape `[batch, heads, len, head_dim]`;
            every row of `layers` holds exactly `len` real positions.
        row: the sequence's row.
    """

    layers: tuple
    row: int

    @property
    def length(self) -> int:
        return self.layers[0][0].shape[2]


@dataclass(eq=False)
class Block:
    """Storage shared by the entries of one forward; its bytes count while `refs > 0`."""

    nbytes: int
    refs: int = 0


@dataclass(eq=False)
class Entry:
    """What the cache holds for one token sequence."""

    kv: KV | None = None
    kv_block: Block | None = None
    row: torch.Tensor | None = None
    row_block: Block | None = None
    #: the key the entry was stored under (looked up again by identity: no compare)
    key: tuple = ()


def tensor_bytes(tensors: Any) -> int:
    """Total bytes of a nested tuple/list of tensors."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(tensor_bytes(t) for t in tensors)


class PrefixCache:
    """LRU map from token-id tuples to `Entry`, evicting least recently used entries
    while the live blocks hold more than `max_bytes` (an `LRU` bounded by bytes,
    charged once per live `Block`).

    Args:
        max_bytes: bound on the bytes of key/value states and rows kept alive.
    """

    def __init__(self, max_bytes: int):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"cache_bytes must be a non-negative integer, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._entries: LRU[tuple, Entry] = LRU(max_bytes=max_bytes, on_evict=self._dropped)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """The bytes of the blocks the entries keep alive."""
        return self._entries.nbytes

    def row(self, key: tuple) -> torch.Tensor | None:
        """The cached next-token row after `key` (marks the entry as used)."""
        entry = self._entries.peek(key)
        if entry is None or entry.row is None:
            return None
        self._entries.touch(key)
        return entry.row

    def longest_kv(self, key: tuple, limit: int) -> tuple[int, KV | None, tuple]:
        """The longest prefix `key[:n]` with `n ≤ limit` whose key/value states are
        cached: `(n, kv, stored key)`, or `(0, None, ())`."""
        entries = self._entries
        parent = getattr(key, "parent", None)
        if parent is not None and len(parent) <= limit:  # the usual case: the parent's states
            entry = entries.peek(parent)
            if entry is not None and entry.kv is not None:
                entries.touch(entry.key)
                return len(parent), entry.kv, entry.key
        for n in range(min(limit, len(key)), 0, -1):
            entry = entries.peek(key[:n])
            if entry is not None and entry.kv is not None:
                entries.touch(entry.key)
                return n, entry.kv, entry.key
        return 0, None, ()

    def put(self, key: tuple, kv: KV | None, kv_block: Block | None, row: torch.Tensor | None, row_block: Block | None) -> None:
        """Store `kv` and/or `row` for `key` (existing parts are replaced), then evict."""
        entry = self._entries.get(key)
        if entry is None:  # a new entry, charged, then kept (`LRU.put` evicts)
            entry = Entry(kv, self._acquire(kv_block), row, self._acquire(row_block), key)
            self._entries.put(key, entry)
            return
        if kv is not None:
            self._release(entry.kv_block)
            entry.kv, entry.kv_block = kv, self._acquire(kv_block)
        if row is not None:
            self._release(entry.row_block)
            entry.row, entry.row_block = row, self._acquire(row_block)
        self._entries.evict()

    def demote(self, key: tuple) -> None:
        """Make `key` the first entry to evict (its sequence has just been extended)."""
        self._entries.demote(key)

    def drop_kv(self) -> None:
        """Forget every key/value state; rows stay."""
        for key, entry in self._entries.items():
            self._release(entry.kv_block)
            entry.kv = entry.kv_block = None
            if entry.row is None:
                self._entries.pop(key)

    def clear(self) -> None:
        for entry in self._entries.values():
            self._release(entry.kv_block)
            self._release(entry.row_block)
        self._entries.clear()

    def _acquire(self, block: Block | None) -> Block | None:
        if block is not None:
            if block.refs == 0:
                self._entries.charge(block.nbytes)
            block.refs += 1
        return block

    def _release(self, block: Block | None) -> None:
        if block is not None:
            block.refs -= 1
            if block.refs == 0:
                self._entries.charge(-block.nbytes)

    def _dropped(self, key: tuple, entry: Entry) -> None:
        """`on_evict`: the evicted entry's blocks lose a reference."""
        self._release(entry.kv_block)
        self._release(entry.row_block)


__all__ = ["KV", "Block", "Entry", "Ids", "PrefixCache", "id_keys", "parent_key", "tensor_bytes"]
