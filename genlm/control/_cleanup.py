"""What `cleanup()` returns: done work that may also be awaited.

Our `cleanup()` methods release their resources synchronously, at the call. 0.4.1's
were coroutines, so code written for it says `await sampler.cleanup()`; both forms
work because `cleanup()` returns a `Cleaned`, an awaitable that is already finished
unless an inner `cleanup()` (a user's `async def cleanup`) returned an awaitable.
Such an inner awaitable is started at once (as a task in a running event loop, or run
to completion when there is none), so it runs whether or not the caller awaits;
awaiting the `Cleaned` waits for it and raises what it raised.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Generator


class Cleaned:
    """The result of `cleanup()`: awaitable, finished unless it holds started tasks."""

    __slots__ = ("_pending",)

    def __init__(self, pending: tuple = ()):
        self._pending = pending

    def __await__(self) -> Generator[Any, None, None]:
        for task in self._pending:
            yield from task.__await__()
        return None

    def __bool__(self) -> bool:
        # `if p.cleanup():` stays as falsy as the None that cleanup() used to return.
        return False

    def __repr__(self) -> str:
        return f"Cleaned(pending={len(self._pending)})"


def _start(result: Any) -> tuple:
    if isinstance(result, Cleaned):
        return result._pending
    if not inspect.isawaitable(result):
        return ()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if running:
        return (asyncio.ensure_future(result),)
    if not inspect.iscoroutine(result):
        raise TypeError(f"cleanup() returned {result!r}, which needs a running event loop")
    asyncio.run(result)
    return ()


def cleaned(*results: Any) -> Cleaned:
    """Combine inner `cleanup()` results (None, `Cleaned` or an awaitable) into one."""
    pending: tuple = ()
    for r in results:
        pending += _start(r)
    return Cleaned(pending)


__all__ = ["Cleaned", "cleaned"]
