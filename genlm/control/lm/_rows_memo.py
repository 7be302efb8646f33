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
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

import numpy as np


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


def compose(positions: np.ndarray | None, inverse: np.ndarray | None) -> np.ndarray | None:
    """The block row of each context: `positions[inverse]`, either side None meaning
    the identity."""
    if positions is None:
        return inverse
    return positions if inverse is None else positions[inverse]


__all__ = ["LastRows", "compose"]
