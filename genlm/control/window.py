"""Collecting concurrent requests made within one pass of the event loop.

This is the only scheduling code in the library. A `Window` gathers the requests
that callers submit while the event loop runs one pass; the first caller of a
window (its holder) waits until a pass adds no request, takes the batch and serves
it by calling the flush function in its own coroutine. Nothing runs in the
background. Every future is resolved or failed:

- an exception raised by the flush reaches every caller of that batch;
- a caller cancelled while waiting leaves the others untouched;
- if the holder dies before or during the flush, its co-callers fail with
  `BatchAbandoned`, never with the holder's own `CancelledError`.
"""

from __future__ import annotations

import asyncio
import types
import weakref
from typing import Any, Awaitable, Callable, Coroutine, Generic, Iterable, TypeVar

R = TypeVar("R")


class BatchAbandoned(RuntimeError):
    """The task holding a batch died before it was served."""


Flush = Callable[[list[Any]], Awaitable[list[Any]]]


class Window(Generic[R]):
    """Requests collected per event loop and served by one `flush(requests)` call.

    Args:
        flush: async function from a list of requests to a list of results of the
            same length and order.
    """

    def __init__(self, flush: Flush):
        self._flush = flush
        self._state: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState]" = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict:
        # Pending requests belong to this process's event loops; a copy starts empty.
        return {"_flush": self._flush}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_flush"])

    def _for_loop(self) -> "_LoopState":
        loop = asyncio.get_running_loop()
        state = self._state.get(loop)
        if state is None:
            state = self._state[loop] = _LoopState()
        return state

    async def submit(self, request: Any) -> R:
        """Add `request` to the current window and wait for its result."""
        state = self._for_loop()
        future = asyncio.get_running_loop().create_future()
        state.queue.append((request, future))
        if state.armed:
            return await future
        state.armed = True
        try:
            size = -1
            while len(state.queue) != size:
                size = len(state.queue)
                await asyncio.sleep(0)
            batch, state.queue = state.queue, []
        except BaseException as exc:
            batch, state.queue = state.queue, []
            _abandon([f for _, f in batch if f is not future], exc)
            raise
        finally:
            state.armed = False
        await self._serve(batch, future)
        return future.result()

    async def _serve(self, batch: list, own: asyncio.Future) -> None:
        requests = [r for r, _ in batch]
        try:
            results = await self._flush(requests)
            if len(results) != len(batch):
                raise RuntimeError(
                    f"batch returned {len(results)} results for {len(batch)} requests"
                )
        except Exception as exc:
            for _, f in batch:
                if not f.done():
                    f.set_exception(exc)
            return
        except BaseException as exc:
            _abandon([f for _, f in batch if f is not own], exc)
            raise
        for (_, f), result in zip(batch, results):
            if not f.done():
                f.set_result(result)


class _LoopState:
    __slots__ = ("queue", "armed")

    def __init__(self):
        self.queue: list = []
        self.armed = False


async def gather_or_cancel(*aws: Awaitable[Any]) -> list[Any]:
    """`asyncio.gather(*aws)`, except that no awaitable outlives a failure.

    When one awaitable raises, or the caller is cancelled, the others are cancelled
    and awaited before the exception propagates (plain `gather` leaves them running
    as orphan tasks). Results are in argument order.
    """
    tasks = [asyncio.ensure_future(a) for a in aws]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        await _cancel_and_wait(tasks)
        raise
    errors = [t.exception() for t in tasks if t.done() and not t.cancelled()]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        await _cancel_and_wait(tasks)
        raise first
    return [t.result() for t in tasks]


async def gather_eager(coros: Iterable[Coroutine[Any, Any, Any]]) -> list[Any]:
    """`gather_or_cancel` over coroutines, without a task for each one that finishes
    without suspending.

    The coroutines are taken from `coros` one at a time, each run at once until it
    returns or first suspends; those that suspend are then resumed together under
    `gather_or_cancel`. A potential whose `prefix` never awaits anything costs one
    call per context instead of one task (tens of microseconds each, `V` of them per
    derived `logw_next` row), and a generator of coroutines is never held in memory
    all at once. Results are in argument order; when one raises, the suspended
    coroutines are closed and the rest are never started.
    """
    results: list[Any] = []
    suspended: list[tuple[int, Coroutine, Any]] = []
    try:
        for i, coro in enumerate(coros):
            try:
                yielded = coro.send(None)
            except StopIteration as stop:
                results.append(stop.value)
            else:
                results.append(None)
                suspended.append((i, coro, yielded))
    except BaseException:
        for _, coro, _ in suspended:
            coro.close()
        raise
    if suspended:
        values = await gather_or_cancel(*(_resumed(c, y) for _, c, y in suspended))
        for (k, _, _), value in zip(suspended, values):
            results[k] = value
    return results


async def _resumed(coro: Coroutine, yielded: Any) -> Any:
    return await _resume(coro, yielded)


@types.coroutine
def _resume(coro: Coroutine, yielded: Any):
    """Drive `coro`, already started and suspended on `yielded`, to its end: what the
    event loop sends or throws in is passed on, as if the caller awaited `coro`."""
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value


async def _cancel_and_wait(tasks: list[asyncio.Future]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _abandon(futures: list[asyncio.Future], cause: BaseException) -> None:
    for f in futures:
        if not f.done():
            err = BatchAbandoned(f"the task holding this batch died: {cause!r}")
            err.__cause__ = cause
            f.set_exception(err)


__all__ = ["Window", "BatchAbandoned", "gather_or_cancel", "gather_eager"]
