"""`MultiProcPotential`: a potential evaluated in worker processes."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

import numpy as np

from genlm.control.potential.base import Potential
from genlm.control.weights import LazyWeights

_worker_potential: Potential | None = None


def _init_worker(factory: Callable[..., Potential], args: tuple) -> None:
    global _worker_potential
    _worker_potential = factory(*args)


def _tables() -> Any:
    return _worker_potential.tables


def _call(method: str, contexts: list) -> Any:
    p = _worker_potential
    calls = {
        "prefix": p.batch_prefix,
        "complete": p.batch_complete,
        "score": p.batch_score,
        "logw_next": p.batch_logw_next,
    }
    result = asyncio.run(calls[method](contexts))
    if method == "logw_next":
        return np.stack([w.weights for w in result]) if result else np.zeros((0, 0))
    return np.asarray(result, dtype=np.float64)


class MultiProcPotential(Potential):
    """A potential built by `factory(*args)` in each of `num_workers` processes.

    Calls are sent to the workers; a batch is split into one chunk per worker.
    Values equal those of `factory(*args)` evaluated in this process.

    Args:
        factory: a picklable callable that builds the potential (e.g. `p.spawn`).
        factory_args: arguments for `factory`.
        num_workers: number of worker processes.
    """

    def __init__(self, factory: Callable[..., Potential], factory_args: tuple = (), num_workers: int = 2):
        if num_workers < 1:
            raise ValueError(f"num_workers must be ≥ 1, got {num_workers}")
        self.factory, self.factory_args, self.num_workers = factory, tuple(factory_args), num_workers
        self.executor = ProcessPoolExecutor(
            max_workers=num_workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(factory, self.factory_args),
        )
        super().__init__(tables=self.executor.submit(_tables).result())

    async def _run(self, method: str, contexts: list) -> list:
        loop = asyncio.get_running_loop()
        size = max(1, -(-len(contexts) // self.num_workers))
        chunks = [contexts[i : i + size] for i in range(0, len(contexts), size)]
        parts = await asyncio.gather(
            *(loop.run_in_executor(self.executor, _call, method, [list(c) for c in chunk]) for chunk in chunks)
        )
        return [row for part in parts for row in part]

    async def prefix(self, context) -> float:
        return float((await self._run("prefix", [context]))[0])

    async def complete(self, context) -> float:
        return float((await self._run("complete", [context]))[0])

    async def score(self, context) -> float:
        return float((await self._run("score", [context]))[0])

    async def logw_next(self, context) -> LazyWeights:
        return self.make_lazy_weights((await self._run("logw_next", [context]))[0])

    async def batch_prefix(self, contexts):
        return np.asarray(await self._run("prefix", list(contexts)), dtype=np.float64)

    async def batch_complete(self, contexts):
        return np.asarray(await self._run("complete", list(contexts)), dtype=np.float64)

    async def batch_score(self, contexts):
        return np.asarray(await self._run("score", list(contexts)), dtype=np.float64)

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not contexts:
            return []
        return self.rows_to_weights(np.stack(await self._run("logw_next", list(contexts))))

    def spawn(self) -> "MultiProcPotential":
        return MultiProcPotential(self.factory, self.factory_args, self.num_workers)

    def cleanup(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)

    def __del__(self):
        executor = self.__dict__.get("executor")
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def __repr__(self) -> str:
        return f"MultiProcPotential({self.factory!r}, workers={self.num_workers})"
