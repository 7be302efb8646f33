import asyncio

import numpy as np
import pytest
from toys.core import Tabular, random_tabular

from genlm.control.potential import AutoBatchedPotential
from genlm.control.testing import assert_autobatch_consistency
from genlm.control.util import BatchAbandoned

VOCAB = ["a", "b", "c"]


def toy(seed=0):
    return random_tabular(VOCAB, np.random.default_rng(seed), p_zero=0.0)


async def test_concurrent_calls_in_one_pass_become_one_batch_call():
    p = toy()
    ab = p.to_autobatched()
    contexts = [[], ["a"], ["b"], ["a", "b"], ["c", "c"]]
    rows = await asyncio.gather(*(ab.logw_next(c) for c in contexts))
    assert p.calls["batch_logw_next"] == 1
    for c, row in zip(contexts, rows):
        np.testing.assert_allclose(row.weights, (await p.logw_next(c)).weights)
    p.calls["batch_prefix"] = 0
    await asyncio.gather(*(ab.prefix(c) for c in contexts), ab.batch_prefix(contexts))
    assert p.calls["batch_prefix"] == 1


async def test_calls_from_separate_passes_are_separate_batches():
    p = toy()
    ab = p.to_autobatched()
    await ab.logw_next([])
    await ab.logw_next(["a"])
    assert p.calls["batch_logw_next"] == 2


async def test_values_equal_the_plain_potential():
    await assert_autobatch_consistency(toy(3), [[], ["a"], ["b", "c"], ["a", "a", "a"]])


def test_autobatched_view_is_memoized():
    p = toy()
    assert p.to_autobatched() is p.to_autobatched()
    assert AutoBatchedPotential.of(p.to_autobatched()) is p.to_autobatched()
    assert p.to_autobatched().tables is p.tables
    with pytest.raises(TypeError):
        AutoBatchedPotential(p.to_autobatched())


class Failing(Tabular):
    async def batch_prefix(self, contexts):
        await asyncio.sleep(0)
        raise RuntimeError("boom")


async def test_an_exception_reaches_every_caller_of_the_batch():
    ab = Failing(VOCAB, {("a",): 1.0}).to_autobatched()
    results = await asyncio.gather(*(ab.prefix([x]) for x in VOCAB), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and str(r) == "boom" for r in results)
    assert asyncio.all_tasks() == {asyncio.current_task()}


class Slow(Tabular):
    async def batch_prefix(self, contexts):
        await asyncio.sleep(0.01)
        return await super().batch_prefix(contexts)


async def test_cancelled_holder_fails_co_callers_with_batch_abandoned():
    ab = Slow(VOCAB, {("a",): 1.0}).to_autobatched()
    holder = asyncio.ensure_future(ab.prefix(["a"]))
    others = [asyncio.ensure_future(ab.prefix([x])) for x in VOCAB]
    await asyncio.sleep(0)  # holder and others queued; holder waits for the pass to settle
    holder.cancel()
    results = await asyncio.gather(*others, return_exceptions=True)
    assert holder.cancelled()
    assert all(isinstance(r, BatchAbandoned) for r in results)


async def test_holder_cancelled_during_the_batch_call_strands_nobody():
    ab = Slow(VOCAB, {("a",): 1.0}).to_autobatched()
    holder = asyncio.ensure_future(ab.prefix(["a"]))
    others = [asyncio.ensure_future(ab.prefix([x])) for x in VOCAB]
    await asyncio.sleep(0.005)  # the batch call is in flight
    holder.cancel()
    results = await asyncio.wait_for(asyncio.gather(*others, return_exceptions=True), 1.0)
    assert all(isinstance(r, BatchAbandoned) for r in results)
    # The potential still works afterwards.
    assert await ab.prefix(["a"]) == 0.0


async def test_a_cancelled_co_caller_does_not_disturb_the_others():
    ab = Slow(VOCAB, {("a",): 1.0, ("b",): 1.0}).to_autobatched()
    tasks = [asyncio.ensure_future(ab.prefix([x])) for x in VOCAB]
    await asyncio.sleep(0)
    tasks[1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == 0.0
    assert isinstance(results[1], asyncio.CancelledError)
    assert results[2] == float("-inf")
