"""The base class's derived `logw_next` (one `prefix` per token): exact rows whether or
not `prefix` suspends, the eager gather behind it, and the warning a slow factor gets."""

import asyncio
import warnings

import numpy as np
import pytest

from genlm.control import Potential, direct_token_sampler
from genlm.control.sampler import token as token_module
from genlm.control.window import gather_eager

VOCAB = [bytes([97 + i % 26, 48 + i // 26]) for i in range(300)]  # over SLOW_ROW_VOCAB


class Soft(Potential):
    """-len(text)/7 plus -1 per "x"; suspends on every third context when `sleepy`."""

    def __init__(self, vocab=VOCAB, sleepy=False):
        super().__init__(vocab)
        self.sleepy, self.calls = sleepy, 0

    async def prefix(self, context):
        self.calls += 1
        if self.sleepy and len(context) and context[-1][0] % 3 == 0:
            await asyncio.sleep(0)
        text = b"".join(context)
        return -len(text) / 7 - text.count(b"x")

    async def complete(self, context):
        return await self.prefix(context) - 0.5


@pytest.mark.parametrize("sleepy", [False, True])
async def test_derived_row_is_prefix_differences(sleepy):
    p = Soft(sleepy=sleepy)
    ctx = [b"a0", b"x1"]
    row = (await p.logw_next(ctx)).weights
    base = await p.prefix(ctx)
    expected = [await p.prefix([*ctx, x]) - base for x in VOCAB] + [await p.complete(ctx) - base]
    np.testing.assert_array_equal(row, np.array(expected))
    assert row[VOCAB.index(b"x0")] == pytest.approx(-2 / 7 - 1)


async def test_gather_eager_keeps_order_and_runs_suspending_ones_concurrently():
    order = []

    async def job(i):
        if i % 2:
            await asyncio.sleep(0)
        order.append(i)
        return i * i

    assert await gather_eager(job(i) for i in range(7)) == [i * i for i in range(7)]
    assert order[:4] == [0, 2, 4, 6]  # the ones that never suspend finish at once
    assert await gather_eager([]) == []


async def test_gather_eager_error_closes_the_suspended_and_starts_no_more():
    started, closed = [], []

    async def job(i):
        started.append(i)
        try:
            if i == 0:
                await asyncio.sleep(10)
            if i == 2:
                raise KeyError("bad")
            return i
        finally:
            closed.append(i)

    with pytest.raises(KeyError, match="bad"):
        await gather_eager(job(i) for i in range(5))
    assert started == [0, 1, 2] and sorted(closed) == [0, 1, 2]


async def test_gather_eager_passes_cancellation_through():
    finished = asyncio.Event()

    async def slow():
        try:
            await asyncio.sleep(10)
        finally:
            finished.set()

    task = asyncio.ensure_future(gather_eager([slow()]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished.is_set()


def test_slow_factor_warns_at_the_users_line_with_advice(monkeypatch):
    monkeypatch.setattr(token_module, "_WARNED_SLOW", set())
    lm = Soft()

    class Mine(Soft):
        pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        direct_token_sampler(lm * Mine())  # the line the warning names
    slow = [w for w in caught if "prefix once per token" in str(w.message)]
    assert len(slow) == 2  # Soft and Mine: one warning per class
    for w in slow:
        assert w.filename == __file__, w.filename
        assert "critic" in str(w.message) and "batch_logw_next" in str(w.message)
        assert "AWRS" not in str(w.message)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        direct_token_sampler(lm * Mine())
    assert not [w for w in again if "prefix once per token" in str(w.message)]


def test_small_or_vectorised_factors_do_not_warn(monkeypatch):
    monkeypatch.setattr(token_module, "_WARNED_SLOW", set())

    class Rows(Soft):
        async def batch_logw_next(self, contexts):
            return [await self.logw_next(c) for c in contexts]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        direct_token_sampler(Soft(vocab=VOCAB[:8]))
        direct_token_sampler(Rows())
    assert not [w for w in caught if "prefix once per token" in str(w.message)]
