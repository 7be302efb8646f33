"""Tiny potentials and checks shared by the reliability tests."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from genlm.control import Potential
from genlm.control import draw as draw_module
from genlm.control.window import Window

# The bigram LM and the AB toys, re-exported for the reliability tests.
from toys.ab import AB, BigramLM, CountCritic, NoBB, ab_lm  # noqa: E402, F401

SINGLE = ("prefix", "complete", "score", "logw_next")
BATCH = ("batch_prefix", "batch_complete", "batch_score", "batch_logw_next")


class Flat(Potential):
    """Weight 1 everywhere over the vocabulary it is given (vocabulary checks)."""

    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return 0.0


class InjectedFault(RuntimeError):
    """The error a `Faulty` potential raises."""


class Faulty(Potential):
    """Wraps a potential, counts the calls of each method, and raises `InjectedFault`
    on the `at`-th call (0-based) of `method`: before awaiting the inner potential, or
    after it when `late` (so the fault lands while other coroutines are in flight)."""

    def __init__(self, inner: Potential):
        super().__init__(tables=inner.tables)
        self.inner = inner
        self.calls: Counter = Counter()
        self.method: str | None = None
        self.at = -1
        self.late = False

    def arm(self, method: str, at: int, late: bool = False) -> None:
        self.calls, self.method, self.at, self.late = Counter(), method, at, late

    def disarm(self) -> None:
        self.calls, self.method = Counter(), None

    def _tick(self, name: str) -> bool:
        n = self.calls[name]
        self.calls[name] += 1
        hit = name == self.method and n == self.at
        if hit and not self.late:
            raise InjectedFault(f"{name} call {n}")
        return hit

    async def _call(self, name: str, arg):
        hit = self._tick(name)
        out = await getattr(self.inner, name)(arg)
        if hit:
            await asyncio.sleep(0)
            raise InjectedFault(f"{name} call {self.at} (late)")
        return out

    async def prefix(self, context):
        return await self._call("prefix", context)

    async def complete(self, context):
        return await self._call("complete", context)

    async def score(self, context):
        return await self._call("score", context)

    async def logw_next(self, context):
        return await self._call("logw_next", context)

    async def batch_prefix(self, contexts):
        return await self._call("batch_prefix", contexts)

    async def batch_complete(self, contexts):
        return await self._call("batch_complete", contexts)

    async def batch_score(self, contexts):
        return await self._call("batch_score", contexts)

    async def batch_logw_next(self, contexts):
        return await self._call("batch_logw_next", contexts)


def windows_of(*potentials) -> list:
    """The draw window and the windows of the autobatched views of `potentials`."""
    out = [w for w in vars(draw_module).values() if isinstance(w, Window)]
    for p in potentials:
        view = None if p is None else p.__dict__.get("_autobatched")
        if view is not None:
            out.extend(view._windows.values())
    return out


def assert_quiescent(*potentials) -> None:
    """No task but the current one, and no request queued or held in any window."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    assert not others, f"tasks left running: {others}"
    loop = asyncio.get_running_loop()
    for w in windows_of(*potentials):
        state = w._state.get(loop)
        if state is not None:
            assert not state.queue, f"requests left queued in {w!r}"
            assert not state.armed, f"a window is still held: {w!r}"


def same(a, b) -> bool:
    """Two `Sequences` with the same contexts and the same log weights."""
    return a.contexts == b.contexts and np.array_equal(a.log_weights, b.log_weights)


BAD_INPUT_DOC = Path(__file__).resolve().parents[2] / "docs" / "bad-input.md"


async def assert_clear_error(thunk, err, match) -> None:
    """One row of the bad-input catalogue: `thunk()` (awaited, within 30 s, when it
    returns a coroutine) raises `err` with a message matching `match`."""
    with pytest.raises(err, match=match):
        out = thunk()
        if asyncio.iscoroutine(out):
            await asyncio.wait_for(out, timeout=30)


def undocumented(row_ids) -> list:
    """The catalogue row ids with no `id` line in docs/bad-input.md."""
    text = BAD_INPUT_DOC.read_text(encoding="utf-8")
    return [r for r in row_ids if f"`{r}`" not in text]
