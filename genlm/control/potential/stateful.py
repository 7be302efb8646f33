"""Potentials written as a state per particle (as in genlm-control 0.4.1).

A `StatefulPotential` scores a context by a `ParticleState` that reads it once,
chunk by chunk: `prefix(ctx)` is the state's score after reading `ctx`,
`complete(ctx)` its score after `finish()`. States are kept in a bounded pool keyed
by the context they have read, so the next call on an extension of `ctx` reads only
the new tokens; `logw_next(ctx)` clones the state once per next token:

    logw_next(ctx)[x] = score(state(ctx) + [x]) - score(state(ctx))
    logw_next(ctx)[EOS] = score(finish(state(ctx))) - score(state(ctx))
"""

from __future__ import annotations

import asyncio
import heapq
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Any, Hashable, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control.potential.base import Potential
from genlm.control.weights import NEG_INF, LazyWeights


def make_immutable(context: Sequence[Any]) -> bytes | str | tuple:
    """A hashable copy of `context`: str, bytes and tuples as they are, a sequence of
    byte values as `bytes`, anything else as a tuple."""
    if isinstance(context, (str, bytes, tuple)):
        return context
    try:
        return bytes(context)
    except (TypeError, ValueError):
        return tuple(context)


class PriorityMap:
    """A map from keys to priorities whose `peek`/`pop` give a key of least priority.

    A binary heap of (priority, serial, key) with stale entries skipped lazily: setting,
    reading and deleting a key are O(1), `peek` and `pop` amortised O(log n).
    """

    def __init__(self) -> None:
        self._priority: dict[Hashable, Any] = {}
        self._heap: list[tuple[Any, int, Hashable]] = []
        self._serial = 0

    def __repr__(self) -> str:
        return f"PriorityMap({self._priority})"

    def __len__(self) -> int:
        return len(self._priority)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._priority

    def __getitem__(self, key: Hashable) -> Any:
        return self._priority[key]

    def __setitem__(self, key: Hashable, priority: Any) -> None:
        self._priority[key] = priority
        self._serial += 1
        heapq.heappush(self._heap, (priority, self._serial, key))

    def __delitem__(self, key: Hashable) -> None:
        del self._priority[key]

    def _top(self) -> tuple[Any, int, Hashable]:
        heap = self._heap
        while heap:
            priority, _, key = heap[0]
            if key in self._priority and self._priority[key] == priority:
                return heap[0]
            heapq.heappop(heap)
        raise ValueError("the PriorityMap is empty")

    def peek(self) -> tuple[Hashable, Any]:
        """(key, priority) of a key of least priority.

        Raises:
            ValueError: the map is empty."""
        priority, _, key = self._top()
        return key, priority

    def pop(self) -> tuple[Hashable, Any]:
        """Remove and return (key, priority) of a key of least priority.

        Raises:
            ValueError: the map is empty."""
        key, priority = self.peek()
        del self._priority[key]
        return key, priority

    def clear(self) -> None:
        self._priority.clear()
        self._heap.clear()


class ParticleState(ABC):
    """The state of one particle: the context read so far and its score.

    Subclasses implement `impl_update_context` (read more tokens), `impl_finish` (the
    context has ended: settle the score, release resources) and `current_score` (the
    log weight of the context as a prefix, or as a complete sequence once finished).

    Args:
        owner: the `StatefulPotential` the state belongs to.
    """

    def __init__(self, owner: "StatefulPotential"):
        self.owner = owner
        self.finished = False
        self.context: list = []

    async def start(self) -> None:
        """Asynchronous set-up, run once by `StatefulPotential.new_state` (none by default)."""

    async def update_context(self, incremental_context: Sequence[Any]) -> None:
        """Read `incremental_context` after the context so far (ignored once finished)."""
        if self.finished:
            return
        self.context.extend(incremental_context)
        await self.impl_update_context(incremental_context)

    async def finish(self) -> None:
        """End the context: `current_score` becomes its complete weight (idempotent)."""
        if self.finished:
            return
        self.finished = True
        await self.impl_finish()

    @property
    @abstractmethod
    def current_score(self) -> float:
        """Log weight of the context: as a prefix, or as a complete sequence once finished."""

    @abstractmethod
    async def impl_update_context(self, incremental_context: Sequence[Any]) -> None: ...

    @abstractmethod
    async def impl_finish(self) -> None: ...

    async def clone(self) -> "ParticleState":
        """An independent state that has read the same context (a finished state is
        its own clone: it no longer changes)."""
        if self.finished:
            return self
        twin = await self.owner.new_state()
        await twin.update_context(list(self.context))
        return twin


class StatefulPotential(Potential):
    """A potential whose weights are read off one `ParticleState` per context.

    `prefix(ctx)` is `state.current_score` after reading `ctx`; `complete(ctx)` is the
    score after `state.finish()`. Unfinished states are pooled by the context they have
    read (at most `cache_size`; the least recently returned are finished and dropped
    first), and a call on `ctx` resumes the pooled state of its longest pooled prefix,
    so SMC's calls on growing contexts read each token once.

    Args:
        vocabulary: the tokens.
        token_type: optional; inferred from `vocabulary`.
        eos: the end marker (`EOS` by default).
        state_class: the `ParticleState` subclass `new_state` builds (or override
            `new_state`).
        cache_size: the most pooled states.
    """

    def __init__(
        self,
        vocabulary: Sequence[Any],
        token_type: Any = None,
        eos: Any = None,
        state_class: type[ParticleState] | None = None,
        cache_size: int = 100,
    ):
        super().__init__(vocabulary=vocabulary, token_type=token_type, eos=eos)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self._state_class = state_class
        self._cache_size = cache_size
        self._pool: OrderedDict[Hashable, list[ParticleState]] = OrderedDict()
        self._pooled = 0

    async def new_state(self) -> ParticleState:
        """A started state that has read nothing.

        Raises:
            NotImplementedError: no `state_class` was given and the subclass does not
                override `new_state`."""
        if self._state_class is None:
            raise NotImplementedError(
                f"{type(self).__name__} needs a state_class= or its own new_state()"
            )
        state = self._state_class(self)
        await state.start()
        return state

    def cleanup(self) -> Cleaned:
        """Finish every pooled state (their background work ends) and empty the pool;
        awaitable (`await potential.cleanup()`, as in 0.4.1)."""
        states = [s for pool in self._pool.values() for s in pool]
        self._pool.clear()
        self._pooled = 0
        return cleaned(asyncio.gather(*(s.finish() for s in states)) if states else None)

    def _take(self, key: Hashable) -> ParticleState | None:
        """Remove and return a pooled state whose context is the longest prefix of `key`."""
        best = None
        if key in self._pool:
            best = key
        else:
            n = len(key)
            for known in self._pool:
                if len(known) < n and key[: len(known)] == known:
                    if best is None or len(known) > len(best):
                        best = known
        if best is None:
            return None
        pool = self._pool[best]
        state = pool.pop()
        if not pool:
            del self._pool[best]
        self._pooled -= 1
        return state

    async def _state_for(self, context: Sequence[Any]) -> ParticleState:
        key = make_immutable(context)
        state = self._take(key)
        if state is None:
            state = await self.new_state()
        read = len(state.context)
        if len(key) > read:
            await state.update_context(list(key[read:]))
        return state

    async def _give_back(self, state: ParticleState) -> None:
        """Pool an unfinished state; finish the oldest ones beyond `cache_size`."""
        if state.finished:
            return
        key = make_immutable(state.context)
        self._pool.setdefault(key, []).append(state)
        self._pool.move_to_end(key)
        self._pooled += 1
        evicted = []
        while self._pooled > self._cache_size:
            oldest = next(iter(self._pool))
            pool = self._pool[oldest]
            evicted.append(pool.pop(0))
            if not pool:
                del self._pool[oldest]
            self._pooled -= 1
        await asyncio.gather(*(s.finish() for s in evicted))

    async def prefix(self, context: list) -> float:
        state = await self._state_for(context)
        score = state.current_score
        await self._give_back(state)
        return score

    async def complete(self, context: list) -> float:
        state = await self._state_for(context)
        await state.finish()
        return state.current_score

    async def logw_next(self, context: list) -> LazyWeights:
        """`logw_next(ctx)[x] = score(state(ctx) + [x]) - score(state(ctx))`, one clone per token.

        Raises:
            ValueError: `context` has weight zero under `prefix` (as in 0.4.1).
        """
        state = await self._state_for(context)
        base = state.current_score
        if base == NEG_INF:
            await self._give_back(state)
            raise ValueError(f"Context {context!r} has weight zero under `prefix`.")

        async def extended(x: Any) -> float:
            twin = await state.clone()
            if x is self.eos:
                await twin.finish()
                return twin.current_score
            await twin.update_context([x])
            score = twin.current_score
            await twin.finish()
            return score

        scores = await asyncio.gather(*(extended(x) for x in self.vocab_eos))
        await self._give_back(state)
        return self.make_lazy_weights(np.asarray(scores, dtype=float) - base)
