"""`Coerced` potentials whose next-token row depends on the context only through a state.

For an inner potential read through `b"".join` whose future after a context is
fixed by a hashable state `s` (a DFA state, a JSON recognizer state):

    logw_next(ctx) = row(s(ctx))

so each state's row is made once, by a subclass's `_walk(s)` over the token trie,
and kept in a bounded LRU; a `logw_next` is then a state lookup and a row copy.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Hashable

import numpy as np

from genlm.control._device import mask_like
from genlm.control._lru import LRU
from genlm.control._state_cache import RowCache
from genlm.control.potential.coerce import Coerced
from genlm.control.weights import NEG_INF, LazyWeights

_MISS = object()


class StateRowCoerced(Coerced):
    """`Coerced` with one row per inner state (same values as `Coerced`).

    Subclasses give `_state(context)` (None when the context has weight zero) and
    `_walk(state)` (the row over `vocab_eos`).

    Args:
        as for `Coerced`, plus `row_cache_size`: the most per-state rows kept.
    """

    def __init__(self, *args, row_cache_size: int = 1024, **kwargs):
        super().__init__(*args, **kwargs)
        self._rows: RowCache[np.ndarray] = RowCache(self._walk, row_cache_size)
        self._masks: RowCache[np.ndarray] = RowCache(self._mask_of_state, row_cache_size)

    #: Whether every row holds only 0 and -inf (a Boolean constraint); only then is
    #: `batch_allowed` offered, since it drops the values (AWRS checks them otherwise).
    boolean_rows = True

    def _state(self, context) -> Hashable | None:
        raise NotImplementedError

    def row_state(self, context) -> Hashable | None:
        """The state whose kept row is `context`'s (None: weight zero). It is all the
        recognizer carries forward: contexts with one state have one row and one set
        of continuations (the compiled engine keys its masks by it)."""
        return self._state(context)

    def _walk(self, state: Any) -> np.ndarray:
        raise NotImplementedError

    # States kept per context image --------------------------------------------

    def _state_by_image(self, context) -> Hashable | None:
        """The state after `context`, kept per context image (its bytes,
        `_by_image`): a context one token past a kept one steps the kept state through
        that token's bytes (`_step_bytes`), so a step of SMC costs each particle its
        last token, not a read of its whole context (`_whole_state`). A context past
        a dead one is dead."""
        image = self.f(list(context))
        kept = self._by_image
        state = kept.get(image, _MISS)
        if state is not _MISS:
            return state
        if context:
            cut = len(image) - len(self.f([context[-1]]))
            parent = kept.peek(image[:cut], _MISS) if cut >= 0 else _MISS
            if parent is None:
                state = None
            elif parent is not _MISS:
                state = self._step_bytes(parent, image[cut:])
        if state is _MISS:
            state = self._whole_state(image)
        kept.put(image, state)
        return state

    def _step_bytes(self, state: Any, data: bytes) -> Hashable | None:
        """The state after `data` from the live `state` (None: dead)."""
        raise NotImplementedError

    def _whole_state(self, image: bytes) -> Hashable | None:
        """The state after the context image `image`, read from the start."""
        raise NotImplementedError

    #: The most context images whose state `_state_by_image` keeps (None: as many as
    #: the inner potential's `cache_size`).
    images_kept: int | None = None

    @cached_property
    def _by_image(self) -> LRU:
        """Context image (bytes) -> state (see `_state_by_image`)."""
        size = self.potential.cache_size
        return LRU(size if self.images_kept is None else min(size, self.images_kept))

    def _live_state(self, context) -> Hashable:
        """The state after `context`.

        Raises:
            ValueError: the context has weight zero.
        """
        state = self._state(context)
        if state is None:
            raise ValueError(f"context {list(context)!r} has weight zero under {self!r}")
        return state

    def _row_of(self, context) -> np.ndarray:
        return self._rows.get(self._live_state(context))

    async def logw_next(self, context) -> LazyWeights:
        """The state's row: `logw_next(ctx)[x] = prefix(ctx·x) − prefix(ctx)`."""
        return self.make_lazy_weights(self._row_of(context).copy())

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not contexts:
            return []
        return self.rows_to_weights(np.stack([self._row_of(c) for c in contexts]))

    # Allowed tokens (`fast_paths.BatchAllowed`): one kept bool row per state --------

    def _mask_of_state(self, state: Any) -> np.ndarray:
        mask = self._rows.get(state) > NEG_INF
        mask.flags.writeable = False
        return mask

    def _mask_of(self, context) -> np.ndarray:
        return self._masks.get(self._live_state(context))

    async def _batch_allowed(self, contexts, like: Any = None) -> Any:
        """Where each context's row is above `-inf`, as a bool block over `vocab_eos`
        (on the device of `like` when it is a tensor): the kept mask of each state,
        so a step pays one stack of bools, not a check of float rows."""
        if not contexts:
            return np.zeros((0, len(self.vocab_eos)), dtype=bool)
        return mask_like(np.stack([self._mask_of(c) for c in contexts]), like)

    @property
    def batch_allowed(self) -> Any:  # type: ignore[override]
        """`_batch_allowed` for a Boolean constraint, else None (not offered)."""
        return self._batch_allowed if self.boolean_rows else None

    def spawn(self) -> "StateRowCoerced":
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.potential = self.potential.spawn()
        c._rows = RowCache(c._walk, self._rows.size)
        c._masks = RowCache(c._mask_of_state, self._masks.size)
        c.__dict__.pop("_by_image", None)  # a spawn keeps its own (a copy may run on another thread)
        return c

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.potential!r}, |V|={len(self.tables.vocab)})"


__all__ = ["StateRowCoerced"]
