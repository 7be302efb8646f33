"""The Ray actor of a pool and the checks made before any actor starts.

`Server` is a plain class: the pool wraps it with `ray.remote` when it starts, so
this module imports Ray only inside the functions that need it.
"""

from __future__ import annotations

import inspect
import os
import traceback
from typing import Any, Callable

RAY_EXTRA = 'pip install "genlm-control[ray]"'


def require_ray():
    """The `ray` module, or one `ImportError` that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"genlm.control.distributed needs Ray, which is not installed: {RAY_EXTRA}"
        ) from exc
    return ray


def describe(fn: Any) -> str:
    """A callable's name for error messages (`module.qualname` where it has one)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module else name


def check_picklable(role: str, fn: Any) -> None:
    """Raises `TypeError` naming `fn` when Ray's serializer (cloudpickle) cannot pickle it.

    Ray sends `setup` and `solve` to every actor by value or by reference; a function
    that closes over a lock, a model or an open file fails here, before any work.
    """
    ray = require_ray()
    try:
        ray.cloudpickle.dumps(fn)
    except Exception as exc:  # cloudpickle raises TypeError, PicklingError, AttributeError, ...
        raise TypeError(
            f"{role} function {describe(fn)} cannot be pickled to send it to Ray actors "
            f"({type(exc).__name__}: {exc}); build what it needs inside setup() instead "
            f"of capturing it"
        ) from exc


def is_async_function(fn: Any) -> bool:
    """True for an `async def` function or an object whose `__call__` is one."""
    return inspect.iscoroutinefunction(fn) or (
        callable(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )


def outcome_of_exception(exc: BaseException) -> tuple:
    """`(False, class name, formatted traceback)`: a failed problem, ready to send back."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return (False, type(exc).__name__, text)


class Server:
    """One model replica: runs `setup()` once, then serves problems concurrently.

    Ray runs every method of this (async) actor on one event loop, so the `solve`
    calls in flight on an actor share its potentials' batching windows and the
    language model's forward passes.
    """

    def __init__(self, setup: Callable[[], Any]):
        self._setup = setup
        self._state: Any = None
        self._functions: dict[str, Callable] = {}

    async def start(self) -> int:
        """Runs `setup()` (awaited when it returns an awaitable); returns the pid."""
        state = self._setup()
        if inspect.isawaitable(state):
            state = await state
        self._state = state
        return os.getpid()

    async def solve(self, box: list, problem: Any, seed: int) -> tuple:
        """`(True, value)` from `await solve(state, problem, seed)`, or the failure
        as `outcome_of_exception` gives it. `box` holds the solve function's object
        reference (in a list, so Ray passes the reference and this actor unpickles the
        function once, not once per problem)."""
        ref = box[0]
        fn = self._functions.get(ref.hex())
        if fn is None:
            fn = self._functions[ref.hex()] = await ref
        try:
            return (True, await fn(self._state, problem, seed))
        except Exception as exc:
            return outcome_of_exception(exc)
