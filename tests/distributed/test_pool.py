"""genlm.control.distributed on a local Ray of 2 CPUs: results, seeds, faults and
cancellation, with the embedded model and with toy setups."""

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from toys import ray_setups as toys  # noqa: E402

from genlm.control.distributed import Pool, ProblemFailed, SetupFailed, problem_seeds  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def ray():
    ray = toys.local_ray()
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def echo_pool(ray):
    """Two light actors (half a CPU each, leaving a CPU for the tests' own pools)."""
    pool = Pool(toys.setup_empty, actors=2, cpus_per_actor=0.5, concurrency=4, env_vars=toys.ENV)
    asyncio.run(pool.start())
    yield pool
    pool.close()


def _pids(results):
    return {r.value[2] for r in results}


# A bound on a hang only, never a timing assertion: actors start in new processes that
# import torch, which takes tens of seconds on a loaded 2-core machine.
HANG = 600.0


async def _wait_for(predicate, task=None):
    """Polls `predicate` (a marker an actor writes) until it holds. If `task`, the run
    that should make it hold, ends first, the wait fails at once with the run's outcome."""
    deadline = time.monotonic() + HANG
    while not predicate():
        if task is not None and task.done():
            raise AssertionError(f"the run ended before the condition held: {task!r}")
        assert time.monotonic() < deadline, "condition not reached (hung?)"
        await asyncio.sleep(0.05)


async def test_llm_results_do_not_depend_on_the_number_of_actors(ray):
    """The same problems with the same seeds on 2 actors and in this process (one
    replica, every problem under one asyncio.gather): the same particles."""
    problems = [*toys.PROMPTS, "boom"]
    seeds = problem_seeds(len(problems), 7)
    pool = Pool(toys.setup_llm, actors=2, cpus_per_actor=0.5, concurrency=3, env_vars=toys.ENV)
    try:
        by_two = await pool.gather(toys.solve_regex, problems, base_seed=7, progress=False)
    finally:
        pool.close()
    llm = toys.setup_llm()
    by_one = await asyncio.gather(*(toys.solve_regex(llm, p, s) for p, s in zip(problems[:-1], seeds)))
    assert [r.index for r in by_two] == list(range(len(problems)))
    assert [r.seed for r in by_two] == seeds
    assert {r.actor for r in by_two} == {0, 1}
    _assert_same_runs(by_one, [r.value for r in by_two[:-1]])
    assert all(r.ok and r.attempts == 1 for r in by_two[:-1])
    boom = by_two[-1]
    assert not boom.ok and boom.error_type == "ValueError" and boom.value is None
    assert "boom: this problem is broken" in boom.error and "solve_regex" in boom.error
    with pytest.raises(ProblemFailed, match=r"problem 6 failed \(ValueError\)"):
        boom.unwrap()


def _assert_same_runs(runs_a, runs_b):
    """The same particles; weights equal up to float32 rounding of forwards batched
    with different neighbours."""
    for (post_a, log_ml_a), (post_b, log_ml_b) in zip(runs_a, runs_b, strict=True):
        assert [text for text, _ in post_a] == [text for text, _ in post_b]
        assert [p for _, p in post_a] == pytest.approx([p for _, p in post_b], abs=1e-5)
        assert log_ml_a == pytest.approx(log_ml_b, rel=1e-5, abs=1e-5)
    assert any(p > 0 for post, _ in runs_a for _, p in post)


@pytest.mark.slow
async def test_llm_results_on_one_actor_and_on_two_are_the_same_bit_for_bit(ray):
    """With `concurrency=1` a problem's forwards are its own, wherever it runs."""
    pools = [
        Pool(toys.setup_llm, actors=1, cpus_per_actor=1, concurrency=1, env_vars=toys.ENV),
        Pool(toys.setup_llm, actors=2, cpus_per_actor=0.5, concurrency=1, env_vars=toys.ENV),
    ]
    try:
        by_one, by_two = await asyncio.gather(
            *(pool.gather(toys.solve_regex, toys.PROMPTS, base_seed=3, progress=False) for pool in pools)
        )
    finally:
        for pool in pools:
            pool.close()
    assert {r.actor for r in by_one} == {0} and {r.actor for r in by_two} == {0, 1}
    assert [r.seed for r in by_one] == [r.seed for r in by_two] == problem_seeds(len(toys.PROMPTS), 3)
    assert [r.unwrap() for r in by_one] == [r.unwrap() for r in by_two]
    assert any(p > 0 for r in by_one for _, p in r.value[0])


async def test_errors_are_records_and_the_others_go_on(echo_pool):
    problems = ["a", "missing", "b", "c"]
    results = await echo_pool.gather(toys.solve_echo, problems, seeds=[5, 6, 7, 8], progress=False)
    assert [r.index for r in results] == [0, 1, 2, 3]
    assert [r.value[:2] for r in results if r.ok] == [("a", 5), ("b", 7), ("c", 8)]
    bad = results[1]
    assert (bad.ok, bad.error_type, bad.seed, bad.attempts) == (False, "KeyError", 6, 1)
    assert "state[\"missing\"]" in bad.error and bad.actor in (0, 1)


async def test_unordered_yields_each_problem_once_over_both_actors(echo_pool):
    n = 40
    results = [r async for r in echo_pool.map(toys.solve_echo, range(n), ordered=False, progress=False)]
    assert sorted(r.index for r in results) == list(range(n))
    assert all(r.value[0] == r.index and r.value[1] == r.seed for r in results)
    assert len(_pids(results)) == 2


async def test_a_killed_actor_is_replaced_and_its_problems_rerun(ray, tmp_path):
    names = ["a", "b", "kill", "c", "d", "e"]
    async with Pool(toys.setup_empty, actors=2, cpus_per_actor=0.5, concurrency=3, env_vars=toys.ENV) as pool:
        results = await pool.gather(
            toys.solve_killing_once, [(n, str(tmp_path)) for n in names], progress=False
        )
    assert [r.index for r in results] == list(range(len(names)))
    assert [r.value for r in results] == names
    killed_pid = int((tmp_path / "killed").read_text())
    # Its problems finished elsewhere: each recorded once, by a live actor.
    assert pool._started_actors == 3  # actors 0 and 1, then 2 in place of the killed one
    ran = sorted(p.name for p in tmp_path.glob("ran-*"))
    assert all(not p.endswith(f"-{killed_pid}") for p in ran)
    assert sorted(p.split("-")[1] for p in ran) == sorted(names)
    # Round-robin: the killed actor 0 also held "a" and "d", which ran again, on the
    # surviving actor 1 or the replacement 2.
    assert [r.attempts for r in results] == [2, 1, 2, 1, 2, 1]
    assert {r.actor for r in results} <= {1, 2}


async def test_a_problem_that_kills_every_actor_ends_as_an_error(ray):
    async with Pool(
        toys.setup_empty, actors=1, cpus_per_actor=0.5, concurrency=2, max_retries=1, env_vars=toys.ENV
    ) as pool:
        results = await pool.gather(toys.solve_always_killing, ["x", "oom", "y"], progress=False)
    assert [r.value for r in results] == ["x", None, "y"]
    oom = results[1]
    assert (oom.error_type, oom.attempts) == ("ActorDied", 2)
    assert "died while solving problem 1" in oom.error and "max_retries=1" in oom.error


async def test_leaving_the_loop_cancels_the_calls_in_flight(echo_pool, tmp_path):
    problems = [(i, str(tmp_path)) for i in range(5)]
    async for result in echo_pool.map(toys.solve_waiting, problems, progress=False):
        assert result.index == 0
        # the other four are running in the actors (a call cancelled before it starts
        # leaves no marker, which would make the check below a race)
        await _wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 4)
        break
    await asyncio.sleep(0)  # the abandoned generator's aclose runs
    expected = {f"cancelled-{i}" for i in range(1, 5)}
    await _wait_for(lambda: {p.name for p in tmp_path.glob("cancelled-*")} == expected)
    # The pool is still usable.
    assert [r.value[0] for r in await echo_pool.gather(toys.solve_echo, ["z"], progress=False)] == ["z"]


async def test_cancelling_the_task_cancels_the_calls_and_close_kills_the_actors(ray, tmp_path):
    import ray as ray_module

    pool = Pool(toys.setup_empty, actors=2, cpus_per_actor=0.5, concurrency=2, env_vars=toys.ENV)
    await pool.start()
    handles = [slot.handle for slot in pool._slots]
    task = asyncio.ensure_future(
        pool.gather(toys.solve_waiting, [(i, str(tmp_path)) for i in range(1, 4)], progress=False)
    )
    await _wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 3, task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_for(lambda: len(list(tmp_path.glob("cancelled-*"))) == 3)
    pool.close()
    # ray.kill only asks for the death: a call sent just after it may still be served
    # (seen once in CI), so each actor is asked again until it answers as dead.
    for handle in handles:
        deadline = time.monotonic() + HANG
        with pytest.raises(ray_module.exceptions.RayActorError):
            while True:
                await handle.start.remote()
                assert time.monotonic() < deadline, "close() left an actor alive"
                await asyncio.sleep(0.05)
    with pytest.raises(RuntimeError, match="was closed"):
        await pool.gather(toys.solve_echo, ["a"])


async def test_a_failing_setup_is_one_clear_error(ray):
    pool = Pool(toys.setup_fails, actors=1, cpus_per_actor=0.5, env_vars=toys.ENV)
    with pytest.raises(SetupFailed, match=r"(?s)setup function .*setup_fails failed in Ray actor 0.*no model here"):
        await pool.gather(toys.solve_echo, ["a"])
    assert pool._slots == []


async def test_more_gpus_than_the_cluster_has_fails_before_any_actor(ray):
    pool = Pool(toys.setup_empty, actors=2, gpus_per_actor=1)
    with pytest.raises(ValueError, match=r"2 actors x 1 GPUs each = 2 GPUs asked, but the Ray cluster has 0"):
        await pool.start()
    assert pool._slots == [] and pool._started_actors == 0


def test_the_core_library_never_imports_ray():
    import subprocess

    code = "import sys, genlm.control, genlm.control.distributed; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert Path(toys.__file__).exists()


async def test_what_ray_cannot_serialize_fails_only_its_problem(echo_pool):
    import threading

    problems = ["a", threading.Lock(), "lock", "b"]
    results = await echo_pool.gather(toys.solve_returning_a_lock, problems, progress=False)
    assert [r.value for r in results] == ["a", None, None, "b"]
    sent, returned = results[1], results[2]
    assert (sent.attempts, sent.actor) == (0, -1)
    assert "problem 1 could not be sent to an actor" in sent.error and "lock" in sent.error
    assert returned.error_type is not None and "lock" in returned.error


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_under_asyncio_run_stops_the_script_and_its_actors(tmp_path):
    import signal
    import subprocess

    script = tmp_path / "interrupted.py"
    markers = tmp_path / "markers"
    markers.mkdir()
    script.write_text(
        toys.INTERRUPTED_SCRIPT.format(marker_dir=str(markers))
    )
    tests = str(Path(toys.__file__).resolve().parents[1])  # where the `toys` package lives
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(markers.glob("started-*"))) < 2:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the problems never started"
            time.sleep(0.1)
        actor_pid = int(next(markers.glob("started-*")).read_text())
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    deadline = time.monotonic() + 30
    while _alive(actor_pid):
        assert time.monotonic() < deadline, "the actor outlived the interrupted script"
        time.sleep(0.1)


async def test_two_maps_at_once_start_the_actors_once(ray):
    pool = Pool(toys.setup_empty, actors=2, cpus_per_actor=0.5, concurrency=2, env_vars=toys.ENV)
    try:
        first, second = await asyncio.gather(
            pool.gather(toys.solve_echo, ["a", "b", "c"], progress=False),
            pool.gather(toys.solve_echo, ["d", "e"], seeds=[1, 2], progress=False),
        )
    finally:
        pool.close()
    assert [r.value[0] for r in first] == ["a", "b", "c"]
    assert [r.value[:2] for r in second] == [("d", 1), ("e", 2)]
    assert pool._started_actors == 2


async def test_closing_the_pool_mid_run_ends_the_run_without_replacements(ray, tmp_path):
    pool = Pool(toys.setup_empty, actors=1, cpus_per_actor=0.5, concurrency=2, env_vars=toys.ENV)
    task = asyncio.ensure_future(
        pool.gather(toys.solve_waiting, [(i, str(tmp_path)) for i in (1, 2)], progress=False)
    )
    await _wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 2, task)
    pool.close()
    with pytest.raises(RuntimeError, match="this Pool was closed; make a new one"):
        await asyncio.wait_for(task, HANG)
    assert pool._started_actors == 1


async def test_closing_the_pool_while_a_replacement_starts_ends_the_run(ray, tmp_path):
    env = {**toys.ENV, "MARKER_DIR": str(tmp_path)}
    pool = Pool(toys.setup_slow_to_replace, actors=1, cpus_per_actor=0.5, concurrency=2, env_vars=env)
    task = asyncio.ensure_future(pool.gather(toys.solve_killing, ["a", "kill"], progress=False))
    try:
        await _wait_for(lambda: (tmp_path / "replacing").exists(), task)
        pool.close()
        with pytest.raises(RuntimeError, match="this Pool was closed; make a new one"):
            await asyncio.wait_for(task, HANG)
    finally:
        (tmp_path / "release").write_text("")  # the replacement's setup may return now


async def test_an_actor_killed_by_ray_kill_is_replaced(ray, tmp_path):
    import ray as ray_module

    names = ["a", "b", "c", "d"]
    async with Pool(toys.setup_empty, actors=2, cpus_per_actor=0.5, concurrency=2, env_vars=toys.ENV) as pool:
        victim = pool._slots[0].handle
        task = asyncio.ensure_future(
            pool.gather(toys.solve_slowly, [(n, str(tmp_path)) for n in names], progress=False)
        )
        await _wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 4, task)
        ray_module.kill(victim)
        results = await asyncio.wait_for(task, HANG)
    assert [r.value for r in results] == names
    # Round-robin: actor 0 held "a" and "c"; they ran again on actor 1 or on 2.
    assert [r.attempts for r in results] == [2, 1, 2, 1]
    assert {results[0].actor, results[2].actor} <= {1, 2} and pool._started_actors == 3
