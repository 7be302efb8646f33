"""Bad input of the ops area (docs/bad-input.md, "Worker processes" and "Coerced
potentials without a vectorised logw_next"): one case per row, each raising the
worker's own error or a clear one naming the problem."""

import pickle

import psutil
import pytest
from toys.workers import BrokenSpawn, FailsToLoad, Faulty, HangsInSpawn, NoSpawn, Unpicklable

from genlm.control.potential import MultiProcPotential
from genlm.control.potential.multi_proc import WorkerDied

BUILD = [
    pytest.param(NoSpawn, NotImplementedError, "NoSpawn does not implement spawn", id="multiproc-no-spawn"),
    pytest.param(BrokenSpawn, AttributeError, "has no attribute 'missing_setting'", id="multiproc-spawn-fails"),
    pytest.param(Unpicklable, (AttributeError, pickle.PicklingError), "pickle", id="multiproc-unpicklable"),
    pytest.param(FailsToLoad, OSError, "refuses to be unpickled", id="multiproc-unpickling-fails"),
]


@pytest.mark.parametrize("make, error, message", BUILD)
def test_a_worker_that_cannot_build_its_potential_raises_its_own_error(make, error, message):
    with pytest.raises(error, match=message):
        make().to_multiprocess(num_workers=2)


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"], ids=lambda n: f"multiproc-num-workers-{n!r}")
def test_num_workers_must_be_a_positive_integer(n):
    with pytest.raises(ValueError, match="num_workers must be an integer ≥ 1"):
        MultiProcPotential(Faulty, (), num_workers=n)


async def test_multiproc_after_cleanup():
    mp = Faulty().to_multiprocess(num_workers=1)
    mp.cleanup()
    mp.cleanup()  # idempotent
    with pytest.raises(RuntimeError, match="was cleaned up; spawn"):
        await mp.prefix([])


async def test_multiproc_method_raises():
    mp = Faulty("raise").to_multiprocess(num_workers=1)
    try:
        with pytest.raises(ValueError, match="prefix refuses"):
            await mp.batch_prefix([[b"a"], [b"b"]])
    finally:
        mp.cleanup()


async def test_multiproc_worker_exits():
    mp = Faulty("exit").to_multiprocess(num_workers=1)
    try:
        with pytest.raises(WorkerDied, match=r"worker process \d+ of MultiProcPotential\(.*Faulty.*exit code 3"):
            await mp.prefix([])
    finally:
        mp.cleanup()


def test_multiproc_cannot_be_pickled():
    mp = Faulty().to_multiprocess(num_workers=1)
    try:
        with pytest.raises(TypeError, match="cannot be pickled; pickle its factory"):
            pickle.dumps(mp)
    finally:
        mp.cleanup()


def test_multiproc_start_timeout():
    children = set(psutil.Process().children())
    with pytest.raises(TimeoutError, match=r"worker process \d+ of MultiProcPotential.* did not start within 0.5 s"):
        MultiProcPotential(HangsInSpawn().spawn, num_workers=2, start_timeout=0.5)
    new = set(psutil.Process().children()) - children
    workers = [p for p in new if "spawn_main" in " ".join(p.cmdline())]  # not the resource tracker
    assert workers == []
