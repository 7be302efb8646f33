"""The last block of next-token log probabilities a `PromptedLLM` fetched, kept for
the next call.

An SMC step asks a model for the rows after the particles' new contexts twice: the
end twist reads their EOS entries right after the draw, and the next step draws from
the rows themselves (after resampling: some contexts repeated, some dropped). The
backend caches rows per key, but each call still stacks them into a fresh block;
`LastRows` keeps the block of the latest call, so a call whose keys are all in it
reads its rows there (`next_token_rows` with the rows' positions) and the block is
not copied again. The values are the same numbers: a key's row is a function of the
key, the temperature and the adapter, which are part of the memo's key.

`ContextKeys` makes those calls' keys: the prompt's ids followed by a context's. A
context asked for twice in a row (the end twist, then the draw) gets the same key
object, and one that extends a context of the latest calls by one token is made from
that context's key and names it as its `parent`, so the lookups that follow (the rows
memo, the backend's cache of states, vLLM's live requests) compare and hash by
identity instead of reading the whole prompt again for every particle at every step.
"""

from __future__ import annotations

import operator
from typing import Any, Awaitable, Callable, Sequence

import numpy as np

from genlm.control.lm._kv_cache import Ids


class LastRows:
    """The latest `(keys, block)` of one model view, under its temperature and adapter."""

    def __init__(self) -> None:
        self._setting: Any = None
        self._index: dict = {}
        self._block: Any = None

    async def rows(
        self, keys: Sequence[tuple], setting: Any, fetch: Callable[[list], Awaitable[Any]]
    ) -> tuple[Any, np.ndarray | None]:
        """`(block, positions)`: row `positions[i]` of `block` is the log probabilities
        after `keys[i]` (`positions` None: row `i`). The block is fetched with
        `fetch(keys)`, which answers `(block, positions)` in the same sense, unless the
        latest block, under the same `setting`, holds every key."""
        index = self._index
        if self._block is not None and setting == self._setting and all(k in index for k in keys):
            return self._block, np.fromiter(
                (index[k] for k in keys), dtype=np.intp, count=len(keys)
            )
        block, positions = await fetch(list(keys))
        self._setting, self._block = setting, block
        self._index = {k: i for i, k in enumerate(keys)} if positions is None else dict(zip(keys, positions.tolist()))
        return block, positions

    def clear(self) -> None:
        self._setting, self._index, self._block = None, {}, None


class ContextKeys:
    """The `Ids` keys `start + ids` of one model view's contexts, kept for later calls.

    Keys are kept by their contexts' ids (short: the prompt is the same for all) in two
    generations: the current one takes every key asked for, and becomes the previous
    one once its keys hold `KEPT_IDS` ids in all (so each generation's memory is
    bounded, and runs that share the view all find their latest keys). A key asked for
    again is the kept object; a key one id longer than a kept one is made from it and
    records it as its `parent` (whose own `parent` is then cleared, so no chain of
    keys outlives the generations). A new `start` (the prompt changed) forgets them
    all. Every key records `start` (the first object of its value) as its `head`.
    """

    holds_no_models = True  # only ids: a run's walk for held models skips it (`_held`)

    #: ids (summed over keys) that make a generation full: 8 MB of references
    KEPT_IDS = 1 << 20

    def __init__(self) -> None:
        self._start: tuple | None = None
        self._top: int | None = None  # the largest id of `start` (None: one is negative)
        self._now: dict[tuple, Ids] = {}
        self._before: dict[tuple, Ids] = {}
        self._ids = 0  # the ids of the keys in `_now`

    def keys(self, start: tuple, tails: Sequence[tuple], bound: int) -> list[Ids]:
        """The key of each `start + tail`, with `below = bound` when every id of `start`
        lies in `[0, bound)` (the tails' ids are the caller's to check)."""
        if start != self._start:
            self._start, self._now, self._before, self._ids = start, {}, {}, 0
            self._top = max(start) if start and min(start) >= 0 else None
        below = bound if self._top is not None and self._top < bound else None
        now, before = self._now, self._before
        out = []
        for tail in tails:
            key = now.get(tail)
            if key is None:
                key = before.get(tail)
                if key is None:
                    parent = _either(now, before, tail[:-1]) if tail else None
                    if parent is None:
                        key = Ids(start + tail)
                    else:
                        key = Ids(parent + tail[-1:])
                        key.parent, parent.parent = parent, None
                    key.head = self._start
                now[tail] = key
                self._ids += len(key)
            key.below = below
            out.append(key)
        if self._ids >= self.KEPT_IDS:
            self._before, self._now, self._ids = now, {}, 0
        return out


class ContextTails:
    """The ids of a model view's contexts (`context_ids`), read once per token.

    A context is a list of tokens the caller grows by one token per step; reading all
    of it to find its ids costs about 90 µs per 1,000 tokens, per particle and step.
    The ids of the contexts of the latest calls are kept beside a snapshot of their
    tokens (two generations, each up to `KEPT_IDS` ids, as `ContextKeys`), found by
    their length and their last three tokens. A context whose tokens but the last are
    the very objects of a kept snapshot (`is`, token by token: 15 µs per 1,000 tokens)
    takes that snapshot's ids and reads only its last token; any other context is read
    whole, as is any context shorter than `SHORT`. A token's id depends on that token
    alone, so the ids are the ones `context_ids` gives, and so are its errors.
    """

    holds_no_models = True  # only tokens and ids: a run's walk for held models skips it

    KEPT_IDS = 1 << 20
    #: contexts shorter than this are read whole and not kept: below about 30 tokens
    #: `context_ids` costs less than the memo's own work (3-4 µs per context)
    SHORT = 31

    def __init__(self) -> None:
        # (length, ids of the last three tokens' objects) -> {ids: snapshot of the tokens}
        self._now: dict[tuple, dict[tuple, tuple]] = {}
        self._before: dict[tuple, dict[tuple, tuple]] = {}
        self._ids = 0

    def tails(self, context_ids: Callable[[Sequence[Any]], list[int]], contexts: Sequence[Sequence[Any]]) -> list[tuple]:
        """`tuple(context_ids(c))` of each context."""
        out = []
        short = self.SHORT
        for context in contexts:
            n = len(context)
            if n < short:  # reading it whole costs less than the memo
                out.append(tuple(context_ids(context)))
                continue
            ids = self._continued(context, n, context_ids) if n > short else None
            if ids is None:
                ids = tuple(context_ids(context))
            kept = self._now.setdefault(_place(context, n), {})
            if ids not in kept:
                kept[ids] = tuple(context)
                self._ids += n
            out.append(ids)
        if self._ids >= self.KEPT_IDS:
            self._before, self._now, self._ids = self._now, {}, 0
        return out

    def _continued(self, context: Sequence[Any], n: int, context_ids: Callable) -> tuple | None:
        place = _place(context[-4:-1], n - 1)  # the parent's last three tokens
        for kept in (self._now.get(place), self._before.get(place)):
            for ids, tokens in (kept or {}).items():
                if all(map(operator.is_, tokens, context)):
                    return ids + tuple(context_ids(context[-1:]))
        return None


def _place(context: Sequence[Any], n: int) -> tuple:
    """Where a context of length `n` (ending with the tokens of `context`) is kept."""
    return (n, *map(id, context[-3:]))


def _either(now: dict, before: dict, tail: tuple) -> Ids | None:
    key = now.get(tail)
    return before.get(tail) if key is None else key


def compose(positions: np.ndarray | None, inverse: np.ndarray | None) -> np.ndarray | None:
    """The block row of each context: `positions[inverse]`, either side None meaning
    the identity."""
    if positions is None:
        return inverse
    return positions if inverse is None else positions[inverse]


__all__ = ["ContextKeys", "ContextTails", "LastRows", "compose"]
