import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from toys.core import random_tabular

from genlm.control.potential import MultiProcPotential
from genlm.control.potential.multi_proc import WorkerDied
from genlm.control.testing import check_potential


@pytest.fixture(scope="module")
def pair():
    p = random_tabular(["a", "b"], np.random.default_rng(7), p_zero=0.1)
    mp = p.to_multiprocess(num_workers=2)
    yield p, mp
    mp.cleanup()


async def test_values_equal_the_in_process_potential(pair):
    p, mp = pair
    assert isinstance(mp, MultiProcPotential)
    assert mp.vocab_eos == p.vocab_eos
    contexts = [[], ["a"], ["b", "a"], ["a", "b", "b"]]
    np.testing.assert_allclose(await mp.batch_prefix(contexts), await p.batch_prefix(contexts))
    np.testing.assert_allclose(
        await mp.batch_complete(contexts), await p.batch_complete(contexts)
    )
    for c in contexts:
        if await p.prefix(c) > -np.inf:
            np.testing.assert_allclose(
                (await mp.logw_next(c)).weights, (await p.logw_next(c)).weights
            )
    live = [c for c in contexts if await p.prefix(c) > -np.inf]
    await check_potential(mp, live)


def test_num_workers_must_be_positive():
    with pytest.raises(ValueError, match="num_workers"):
        MultiProcPotential(lambda: None, (), num_workers=0)


# Faults -------------------------------------------------------------------------

from toys.workers import Faulty  # noqa: E402


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_for_call(mp, task):
    # the call is in flight once its worker is busy
    while not mp._busy and not task.done():
        await asyncio.sleep(0.01)


async def test_a_cancelled_call_terminates_its_hung_worker_and_the_pool_recovers():
    mp = Faulty("hang").to_multiprocess(num_workers=1)
    try:
        (old,) = mp.worker_pids()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mp.prefix([b"a"]), 0.5)
        assert _gone(old)
        assert mp.worker_pids() == []  # the slot is refilled on the next call
        assert await mp.complete([b"a", b"b"]) == -3.0
        (new,) = mp.worker_pids()
        assert new != old
    finally:
        mp.cleanup()
    assert _gone(new)


async def test_cleanup_stops_a_worker_stuck_in_a_call():
    mp = Faulty("hang").to_multiprocess(num_workers=2)
    pids = mp.worker_pids()
    task = asyncio.ensure_future(mp.prefix([]))
    await _wait_for_call(mp, task)
    mp.cleanup()
    assert all(_gone(pid) for pid in pids)
    with pytest.raises(WorkerDied, match="MultiProcPotential"):
        await task
    with pytest.raises(RuntimeError, match="cleaned up"):
        await mp.complete([])


async def test_a_method_error_is_the_workers_own_and_the_worker_stays():
    mp = Faulty("raise").to_multiprocess(num_workers=1)
    try:
        pids = mp.worker_pids()
        with pytest.raises(ValueError, match=r"prefix refuses \[b'a'\]") as info:
            await mp.prefix([b"a"])
        assert any("raised in worker process" in note for note in info.value.__notes__)
        assert mp.worker_pids() == pids
        assert await mp.complete([]) == -1.0
    finally:
        mp.cleanup()


async def test_a_crashed_worker_is_named_and_replaced():
    mp = Faulty("exit").to_multiprocess(num_workers=1)
    try:
        (old,) = mp.worker_pids()
        with pytest.raises(WorkerDied, match=r"MultiProcPotential.*died while computing prefix \(exit code 3\)"):
            await mp.prefix([])
        assert await mp.complete([b"b"]) == -2.0
        assert mp.worker_pids() != [old]
    finally:
        mp.cleanup()


async def test_calls_beyond_the_workers_wait_their_turn():
    mp = Faulty().to_multiprocess(num_workers=2)
    try:
        contexts = [[b"a"] * n for n in range(7)]
        got = await asyncio.gather(*(mp.prefix(c) for c in contexts), mp.batch_complete(contexts))
        assert got[:7] == [-float(n) for n in range(7)]
        np.testing.assert_array_equal(got[7], [-n - 1.0 for n in range(7)])
    finally:
        mp.cleanup()


EXIT_SCRIPT = """
import asyncio, sys
from toys.workers import Faulty

if __name__ == "__main__":
    mp = Faulty("hang").to_multiprocess(num_workers=2)
    print(*mp.worker_pids(), flush=True)
    loop = asyncio.new_event_loop()
    task = loop.create_task(mp.prefix([]))  # left running: no cancel, no cleanup
    loop.run_until_complete(asyncio.sleep(0.5))
    sys.exit(0)
"""


def test_the_interpreter_exits_with_a_worker_stuck_in_a_call(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(EXIT_SCRIPT)
    tests = str(Path(__file__).resolve().parent.parent)  # where the `toys` package lives
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2 and all(_gone(pid) for pid in pids)


async def test_a_failing_chunk_leaves_the_other_workers_running():
    mp = Faulty("raise").to_multiprocess(num_workers=3)
    try:
        pids = mp.worker_pids()
        with pytest.raises(ValueError, match="prefix refuses"):
            await mp.batch_prefix([[b"a"], [b"b"], [b"a", b"b"]])
        assert mp.worker_pids() == pids
    finally:
        mp.cleanup()
