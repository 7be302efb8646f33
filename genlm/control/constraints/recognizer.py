"""The shared frame of potentials that answer from per-context states in a cache."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from genlm.control.potential.base import Potential


class CachedRecognizer(Potential):
    """A potential whose `prefix`/`complete` read a state cached per context.

    Subclasses build their (bounded) caches in `_init_cache`; a batch is answered
    context by context from the cache, a `spawn` shares the compiled tables and
    starts with empty caches.
    """

    def _init_cache(self) -> None:
        raise NotImplementedError

    async def batch_prefix(self, contexts: Sequence[Sequence]) -> np.ndarray:
        return np.array([await self.prefix(c) for c in contexts], dtype=np.float64)

    async def batch_complete(self, contexts: Sequence[Sequence]) -> np.ndarray:
        return np.array([await self.complete(c) for c in contexts], dtype=np.float64)

    def spawn(self) -> "CachedRecognizer":
        """A copy sharing the compiled tables, with its own empty caches."""
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.__dict__.pop("_autobatched", None)
        c._init_cache()
        return c

    # Attributes `_init_cache` builds: a pickled copy travels without them (as a
    # `spawn` starts without them) and rebuilds them on load.
    _CACHES: tuple = ("_cache", "_cache_obj")

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for key in self._CACHES:
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_cache()

    def clear_cache(self) -> None:
        """Drop every cached state."""
        self._init_cache()
