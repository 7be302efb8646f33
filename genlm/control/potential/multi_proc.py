"""`MultiProcPotential`: a potential evaluated in worker processes."""

from __future__ import annotations

import asyncio
import atexit
import pickle
import weakref
from collections import deque
from typing import Callable

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control.potential._worker import TERMINATE_TIMEOUT, Worker, WorkerDied, worker_error
from genlm.control.potential.base import Potential
from genlm.control.weights import LazyWeights

_LIVE: "weakref.WeakSet[MultiProcPotential]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    # Runs before multiprocessing's own exit handler (registered earlier), which
    # joins terminated workers without a timeout.
    for potential in list(_LIVE):
        potential.cleanup()


class MultiProcPotential(Potential):
    """A potential built by `factory(*args)` in each of `num_workers` processes.

    Calls are sent to idle workers; a batch is split into one chunk per worker.
    Values equal those of `factory(*args)` evaluated in this process.

    Workers are daemon processes: a worker whose call is cancelled is terminated
    (SIGTERM, then SIGKILL after `TERMINATE_TIMEOUT` s) and replaced by a fresh one
    on the next call, so a method that never returns costs one worker, not the
    program; `cleanup()` and interpreter exit stop every worker the same way. An
    exception raised in a worker (by `factory`, by unpickling it, or by a method)
    is re-raised here with its own type and message; a worker that dies without
    answering raises `WorkerDied` naming the potential.

    Args:
        factory: a picklable callable that builds the potential (e.g. `p.spawn`).
        factory_args: arguments for `factory`.
        num_workers: number of worker processes.
        start_timeout: seconds to wait for the workers to build their potentials
            (None: no limit).

    Raises:
        ValueError: if `num_workers < 1`.
        Exception: whatever pickling `(factory, factory_args)` or building the
            potential in a worker raises.
    """

    def __init__(
        self,
        factory: Callable[..., Potential],
        factory_args: tuple = (),
        num_workers: int = 2,
        start_timeout: float | None = None,
    ):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer ≥ 1, got {num_workers!r}")
        self.factory, self.factory_args, self.num_workers = factory, tuple(factory_args), num_workers
        self.start_timeout = start_timeout
        self._payload = pickle.dumps((factory, self.factory_args))
        self._closed = False
        self._idle: list[Worker | None] = []
        self._busy: set[Worker] = set()
        self._waiters: deque[asyncio.Future] = deque()
        try:
            for _ in range(num_workers):
                self._idle.append(Worker(self._payload, repr(self)))
            for worker in self._idle:
                worker.ready_sync(start_timeout)
        except BaseException:
            self.cleanup()
            raise
        _LIVE.add(self)
        super().__init__(tables=self._idle[0].tables)

    # Workers ----------------------------------------------------------------

    async def _acquire(self) -> Worker:
        """An idle worker (started, if its slot was emptied), waiting for one if all are busy."""
        while not self._idle:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                slot = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._release(waiter.result())
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            self._idle.append(slot)
        slot = self._idle.pop()
        self._check_open()
        try:
            worker = slot if slot is not None else Worker(self._payload, repr(self))
        except BaseException:  # e.g. no process could be started: keep the slot
            self._release(None)
            raise
        self._busy.add(worker)
        try:
            if not worker.ready:
                await worker.ready_async()
        except BaseException:
            self._discard(worker)
            raise
        return worker

    def _release(self, slot: Worker | None) -> None:
        """Give a worker (or an emptied slot, None) to the next waiter, else back to the idle list."""
        if slot is not None:
            self._busy.discard(slot)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(slot)
                return
        self._idle.append(slot)

    def _discard(self, worker: Worker) -> None:
        """Stop a worker that is mid-call or dead, and empty its slot."""
        self._busy.discard(worker)
        worker.stop()
        if not self._closed:
            self._release(None)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} was cleaned up; spawn() a new one to keep computing")

    async def _ask(self, method: str, chunk: list) -> np.ndarray:
        """One chunk of a call, answered by one worker."""
        self._check_open()
        worker = await self._acquire()
        doing = f"computing {method}"
        try:
            worker.send((method, chunk), doing)
            await worker.wait_readable()
            status, *rest = worker.receive(doing)
        except BaseException:  # cancelled, or the worker died: it cannot be reused
            self._discard(worker)
            raise
        self._release(worker)
        if status == "err":
            raise worker_error(*rest, where=worker.describe())
        return rest[0]

    async def _run(self, method: str, contexts: list) -> list:
        size = max(1, -(-len(contexts) // self.num_workers))
        chunks = [[list(c) for c in contexts[i : i + size]] for i in range(0, len(contexts), size)]
        tasks = [asyncio.ensure_future(self._ask(method, chunk)) for chunk in chunks]
        try:
            # a chunk that fails does not cancel the others: that would kill their workers
            await asyncio.wait(tasks)
        except BaseException:  # the caller was cancelled: so is every chunk
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        errors = [task.exception() for task in tasks]  # retrieves every one
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return [row for task in tasks for row in task.result()]

    def worker_pids(self) -> list[int]:
        """Process ids of the workers started and not stopped."""
        workers = [w for w in self._idle if w is not None] + list(self._busy)
        return sorted(w.process.pid for w in workers)

    # Potential ----------------------------------------------------------------

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
        return MultiProcPotential(self.factory, self.factory_args, self.num_workers, self.start_timeout)

    def cleanup(self, timeout: float = TERMINATE_TIMEOUT) -> Cleaned:
        """Stop every worker: idle ones are asked to exit, busy ones terminated; any
        still alive after `timeout` s is killed. Later calls raise `RuntimeError`."""
        self._closed = True
        _LIVE.discard(self)
        idle = [w for w in self.__dict__.get("_idle", []) if w is not None]
        busy = list(self.__dict__.get("_busy", ()))
        self._idle, self._busy = [], set()
        for worker in idle:
            worker.stop(graceful=True, timeout=timeout)
        for worker in busy:
            worker.stop(timeout=timeout)
        for waiter in self.__dict__.get("_waiters", ()):
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_exception(RuntimeError(f"{self!r} was cleaned up"))
        return cleaned()

    def __del__(self):
        for worker in list(self.__dict__.get("_idle", [])) + list(self.__dict__.get("_busy", ())):
            if worker is not None:
                worker.kill_now()

    def __getstate__(self) -> dict:
        raise TypeError(f"{self!r} holds worker processes and cannot be pickled; pickle its factory instead")

    def __repr__(self) -> str:
        return f"MultiProcPotential({self.factory!r}, workers={self.num_workers})"


__all__ = ["MultiProcPotential", "WorkerDied"]
