"""`run(awaitable)`: the library's async API from a script or a notebook cell.

Every entry point of the library is a coroutine (`sampler.smc(...)`, `SMC(...)(...)`,
`potential.prefix(...)`), and `run` awaits one to its result from code that is not
itself async. Without an event loop in the calling thread it is `asyncio.run`. In a
thread whose loop is already running (a Jupyter or IPython cell, where `asyncio.run`
raises "cannot be called from a running event loop"), the awaitable runs to its end
on a fresh event loop in a worker thread while the calling thread waits; an
interrupt (Ctrl-C, the notebook's stop button) cancels it there and is raised here.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from typing import Any, Awaitable, TypeVar

from genlm.control._warn import ORIGIN, origin_of

T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    """Await `awaitable` to its result from code that is not async.

    `genlm.control.run(sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=16))`
    returns the `Sequences` that `await sampler.smc(...)` returns inside a coroutine.

    Args:
        awaitable: a coroutine (the call `sampler.smc(...)`, not the method) or any
            other awaitable.

    Returns:
        The awaitable's result; its exception, if it raises one, is raised here.

    Raises:
        TypeError: `awaitable` is not awaitable (e.g. the method itself rather than
            its call, or a result that was already awaited).
    """
    if not inspect.isawaitable(awaitable):
        hint = ""
        if inspect.iscoroutinefunction(awaitable) or inspect.ismethod(awaitable):
            hint = " (call it: pass `f(...)`, not `f`)"
        raise TypeError(
            f"run() needs an awaitable such as `sampler.smc(...)`, got {awaitable!r}{hint}"
        )
    coroutine = awaitable if inspect.iscoroutine(awaitable) else _awaited(awaitable)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    return _run_in_thread(coroutine, origin_of(sys._getframe(1)))


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _run_in_thread(coroutine: Any, origin: Any) -> Any:
    """Run `coroutine` on a fresh loop in a worker thread and wait for it here; its
    warnings point at `origin`, the line that called `run`."""
    started, finished = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def worker() -> None:
        loop = asyncio.new_event_loop()
        ORIGIN.set(origin)  # the task below runs in a copy of this thread's context
        try:
            box["task"], box["loop"] = loop.create_task(coroutine), loop
            started.set()
            box["result"] = loop.run_until_complete(box["task"])
        except BaseException as exc:  # handed to the waiting thread, which raises it
            box["error"] = exc
        finally:
            started.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                finished.set()

    thread = threading.Thread(target=worker, name="genlm-control-run", daemon=True)
    thread.start()
    # waiting on an event, not `thread.join`: an interrupt during `join` marks the
    # thread as stopped while it still runs (CPython's bpo-45274 handling)
    try:
        while not finished.wait(0.1):
            pass
    except KeyboardInterrupt:
        started.wait()
        try:
            box["loop"].call_soon_threadsafe(box["task"].cancel)
        except (KeyError, RuntimeError):  # never started, or already ended and closed
            pass
        finished.wait()
        raise
    if "error" in box:
        raise box["error"]
    return box["result"]


__all__ = ["run"]
