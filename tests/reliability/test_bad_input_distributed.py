"""Bad input to genlm.control.distributed: one case per row of docs/bad-input.md
("Distributed runs on Ray"), each a clear error raised before any problem runs."""

import importlib.util
import sys
import threading

import pytest
from toys import ray_setups as toys
from toys.reliability import assert_clear_error, undocumented

from genlm.control.distributed import Pool, SetupFailed  # noqa: E402

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")
_started = []


@pytest.fixture(scope="module", autouse=True)
def _shutdown_ray():
    yield
    if _started:
        import ray

        ray.shutdown()


def _local_ray():
    """The local Ray of 2 CPUs, started at the first row that needs a cluster."""
    if not _started:
        toys.local_ray()
        _started.append(True)


def _without_ray():
    saved = sys.modules.get("ray")
    sys.modules["ray"] = None  # `import ray` raises ImportError
    try:
        Pool(toys.setup_empty)
    finally:
        if saved is None:
            del sys.modules["ray"]
        else:
            sys.modules["ray"] = saved


def _capturing_a_lock():
    """A setup and a solve that close over a lock (as over a loaded model or a file)."""
    lock = threading.Lock()

    def setup_with_lock():
        return lock

    async def solve_with_lock(state, problem, seed):
        with lock:
            return problem

    return setup_with_lock, solve_with_lock


def _solve_not_async(state, problem, seed):
    return problem


def _gather(solve=toys.solve_echo, problems=("a", "b"), **kwargs):
    # The pool never starts: every check below comes before Ray is contacted.
    return Pool(toys.setup_empty, actors=1).gather(solve, list(problems), **kwargs)


async def _too_many_gpus():
    _local_ray()
    await Pool(toys.setup_empty, actors=2, gpus_per_actor=1).start()


async def _too_many_cpus():
    _local_ray()
    await Pool(toys.setup_empty, actors=3, cpus_per_actor=1).start()


async def _setup_fails():
    _local_ray()
    pool = Pool(toys.setup_fails, actors=1, cpus_per_actor=0.5, env_vars=toys.ENV)
    await pool.gather(toys.solve_echo, ["a"])


def _ray_row(*values):
    return pytest.param(*values, marks=needs_ray, id=values[0])


# (row id, thunk, error type, message pattern); keep in the order of docs/bad-input.md
ROWS = [
    pytest.param("distributed-no-ray", _without_ray, ImportError, r'needs Ray, which is not installed: pip install "genlm-control\[ray\]"', id="distributed-no-ray"),
    _ray_row("distributed-setup-unpicklable", lambda: Pool(_capturing_a_lock()[0]), TypeError, r"setup function .*setup_with_lock cannot be pickled to send it to Ray actors \(TypeError: cannot pickle '_thread.lock' object\)"),
    _ray_row("distributed-setup-not-callable", lambda: Pool("model-name"), TypeError, "setup must be a callable that builds the actor's state, got str"),
    _ray_row("distributed-solve-unpicklable", lambda: _gather(_capturing_a_lock()[1]), TypeError, r"solve function .*solve_with_lock cannot be pickled to send it to Ray actors"),
    _ray_row("distributed-solve-not-async", lambda: _gather(_solve_not_async), TypeError, r"solve must be an async function \(async def\), got .*_solve_not_async"),
    _ray_row("distributed-actors-0", lambda: Pool(toys.setup_empty, actors=0), ValueError, "actors must be a positive integer, got 0"),
    _ray_row("distributed-actors-1.5", lambda: Pool(toys.setup_empty, actors=1.5), ValueError, "actors must be a positive integer, got 1.5"),
    _ray_row("distributed-actors-True", lambda: Pool(toys.setup_empty, actors=True), TypeError, r"actors must be a number, got True \(a bool\)"),
    _ray_row("distributed-concurrency-0", lambda: Pool(toys.setup_empty, concurrency=0), ValueError, "concurrency must be a positive integer, got 0"),
    _ray_row("distributed-max-retries--1", lambda: Pool(toys.setup_empty, max_retries=-1), ValueError, "max_retries must be a non-negative integer, got -1"),
    _ray_row("distributed-gpus-negative", lambda: Pool(toys.setup_empty, gpus_per_actor=-1), ValueError, "gpus_per_actor must be a finite number >= 0, got -1"),
    _ray_row("distributed-gpus-1.5", lambda: Pool(toys.setup_empty, gpus_per_actor=1.5), ValueError, r"gpus_per_actor above 1 must be a whole number \(Ray's rule\), got 1.5"),
    _ray_row("distributed-env-not-str", lambda: Pool(toys.setup_empty, env_vars={"A": 1}), TypeError, "env_vars must be a dict of str to str"),
    _ray_row("distributed-seeds-length", lambda: _gather(seeds=[1, 2, 3]), ValueError, "seeds has 3 entries for 2 problems; give one seed per problem"),
    _ray_row("distributed-seed-negative", lambda: _gather(seeds=[1, -2]), ValueError, r"seeds\[1\] must be a non-negative integer, got -2"),
    _ray_row("distributed-base-seed-float", lambda: _gather(base_seed=0.5), ValueError, "base_seed must be a non-negative integer, got 0.5"),
    _ray_row("distributed-too-many-gpus", _too_many_gpus, ValueError, r"2 actors x 1 GPUs each = 2 GPUs asked, but the Ray cluster has 0; lower actors or gpus_per_actor"),
    _ray_row("distributed-too-many-cpus", _too_many_cpus, ValueError, r"3 actors x 1 CPUs each = 3 CPUs asked, but the Ray cluster has 2"),
    _ray_row("distributed-setup-fails", _setup_fails, SetupFailed, r"(?s)setup function .*setup_fails failed in Ray actor 0 \(slot 0\):.*OSError: no model here"),
]  # fmt: skip


@pytest.mark.parametrize("row_id, thunk, err, match", ROWS)
async def test_bad_input_gives_a_clear_error(row_id, thunk, err, match):
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    missing = undocumented(row.values[0] for row in ROWS)
    assert not missing, f"rows without a line in docs/bad-input.md: {missing}"
