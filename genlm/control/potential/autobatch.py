"""`AutoBatchedPotential`: concurrent calls to a potential served as batches."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control.potential.base import Potential
from genlm.control.weights import LazyWeights, LazyWeightsBatch
from genlm.control.window import BatchAbandoned, Window


class _Calls(NamedTuple):
    """The contexts of one caller, single or batch."""

    contexts: Sequence[list]


class AutoBatchedPotential(Potential):
    """A view of a potential whose concurrent calls are collected and batched.

    Single calls (`prefix`, `complete`, `score`, `logw_next`) and batch calls made
    within one pass of the event loop are joined, per method, into one call of the
    inner potential's `batch_*` method. An exception in that call reaches every
    caller of the batch; a caller that is cancelled strands nobody (see
    `genlm.control.window`). Values are the inner potential's, and so are the fast
    paths it declares (`genlm.control.potential.fast_paths`), forwarded one by one.

    Use `potential.to_autobatched()`, which returns one wrapper per potential.
    """

    collects_calls = True  # SMC scores a critic that declares this with one batch_score


    def __init__(self, potential: Potential):
        if isinstance(potential, AutoBatchedPotential):
            raise TypeError("potential is already autobatched")
        self.potential = potential
        super().__init__(tables=potential.tables)
        self._windows = {
            name: Window(self._flusher(potential, "batch_" + name))
            for name in ("prefix", "complete", "score", "logw_next")
        }

    @classmethod
    def of(cls, potential: Potential) -> "AutoBatchedPotential":
        """The autobatched view of `potential`, created once and then reused."""
        if isinstance(potential, AutoBatchedPotential):
            return potential
        view = potential.__dict__.get("_autobatched")
        if view is None:
            view = cls(potential)
            potential.__dict__["_autobatched"] = view
        return view

    @staticmethod
    def _flusher(potential: Potential, batch_method: str):
        # The method is looked up at each flush, so that one replaced on the inner
        # potential after the view was made (a counter, a mock) serves the batches.
        async def flush(requests: list[_Calls]) -> list[list]:
            contexts = [c for r in requests for c in r.contexts]
            results = await getattr(potential, batch_method)(contexts)
            sizes = [len(r.contexts) for r in requests]
            if isinstance(results, LazyWeightsBatch):
                # rows made as one block keep it per caller (a view: the draw reads it as is)
                return results.parts(sizes)
            results = list(results)
            out, start = [], 0
            for n in sizes:
                out.append(results[start : start + n])
                start += n
            return out

        return flush

    async def _one(self, name: str, context) -> Any:
        return (await self._windows[name].submit(_Calls([context])))[0]

    async def _many(self, name: str, contexts) -> list:
        if not contexts:
            return []
        return await self._windows[name].submit(_Calls(list(contexts)))

    async def prefix(self, context) -> float:
        return float(await self._one("prefix", context))

    async def complete(self, context) -> float:
        return float(await self._one("complete", context))

    async def score(self, context) -> float:
        return float(await self._one("score", context))

    async def logw_next(self, context) -> LazyWeights:
        return await self._one("logw_next", context)

    async def batch_prefix(self, contexts):
        return np.asarray(await self._many("prefix", contexts), dtype=np.float64)

    async def batch_complete(self, contexts):
        return np.asarray(await self._many("complete", contexts), dtype=np.float64)

    async def batch_score(self, contexts):
        return np.asarray(await self._many("score", contexts), dtype=np.float64)

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        rows = await self._many("logw_next", contexts)
        return rows if isinstance(rows, LazyWeightsBatch) else LazyWeightsBatch(rows)

    # Fast paths: the inner potential's, forwarded (see `fast_paths`) ----------

    def rows_class(self) -> type:
        return self.potential.rows_class()

    async def sparse_logw_next(self, context):
        return await self.potential.sparse_logw_next(context)

    @property
    def cheap_logw_next(self) -> bool:  # type: ignore[override]
        return self.potential.cheap_logw_next

    @property
    def allowed_next(self) -> Any:
        return self.potential.allowed_next

    @property
    def batch_allowed(self) -> Any:
        return self.potential.batch_allowed

    @property
    def token_trie(self) -> Any:
        return self.potential.token_trie

    @property
    def batch_tokens_to_finish(self) -> Any:
        return self.potential.batch_tokens_to_finish

    @property
    def batch_most_tokens_to_finish(self) -> Any:
        return self.potential.batch_most_tokens_to_finish

    @property
    def batch_eos_entries(self) -> Any:
        return self.potential.batch_eos_entries

    @property
    def stateful(self) -> bool:  # type: ignore[override]
        return self.potential.stateful

    def state_of(self, context: list) -> Any:
        return self.potential.state_of(context)

    def advance(self, state: Any, token: Any) -> Any:
        return self.potential.advance(state, token)

    def logw_next_of(self, state: Any) -> np.ndarray:
        return self.potential.logw_next_of(state)

    def alloc_rows(self, n: int):
        return self.potential.alloc_rows(n)

    def rows_to_weights(self, block: np.ndarray) -> LazyWeightsBatch:
        return self.potential.rows_to_weights(block)

    # What answers for the inner potential: its engine form and its coercions (the
    # values are the view's, which are the inner's) ----------------------------

    def engine_source(self) -> Any:
        return self.potential.engine_source()

    @property
    def compiled_coercion(self) -> Any:  # type: ignore[override]
        return self.potential.compiled_coercion

    def generic_coercion(self, other, f, prune, homomorphic, trie) -> Any:
        return self.potential.generic_coercion(other, f, prune, homomorphic, trie)

    def coerce(self, other, f, prune=True, homomorphic=None, trie=None, *, engine=None) -> Any:
        return self.potential.coerce(other, f, prune, homomorphic, trie, engine=engine)

    def normalize(self) -> Any:
        return self.potential.normalize()

    def to_autobatched(self) -> "AutoBatchedPotential":
        return self

    def to_multiprocess(self, num_workers: int = 2, spawn_args: tuple = ()) -> Any:
        return self.potential.to_multiprocess(num_workers, spawn_args)

    # The contract checks run through the view, so they cover its batching too.
    assert_contract = Potential.assert_contract
    assert_logw_next_consistency = Potential.assert_logw_next_consistency
    assert_autoreg_fact = Potential.assert_autoreg_fact
    assert_batch_consistency = Potential.assert_batch_consistency

    def spawn(self) -> "AutoBatchedPotential":
        return AutoBatchedPotential.of(self.potential.spawn())

    def is_terminal_only(self) -> bool:
        return self.potential.is_terminal_only()

    def cleanup(self) -> Cleaned:
        return cleaned(self.potential.cleanup())

    def __reduce__(self):
        return (AutoBatchedPotential.of, (self.potential,))

    def __getattr__(self, name: str) -> Any:
        # Reached only for attributes this view lacks: forward to the inner potential.
        if name.startswith("__") or name == "potential":
            raise AttributeError(name)
        return getattr(self.potential, name)

    def __repr__(self) -> str:
        return f"AutoBatchedPotential({self.potential!r})"


def autobatched(potential: Potential | None) -> AutoBatchedPotential | None:
    """The autobatched view of `potential` (`potential.to_autobatched()`), by its 0.4.1
    name; None stays None (an optional critic or proposal), as in 0.4.1.

    Raises:
        TypeError: anything else that is not a `Potential`.
    """
    if potential is None:
        return None
    if not isinstance(potential, Potential):
        raise TypeError(f"autobatched needs a Potential, got {type(potential).__name__}")
    return AutoBatchedPotential.of(potential)


__all__ = ["AutoBatchedPotential", "BatchAbandoned", "autobatched"]
