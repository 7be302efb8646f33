"""Setups, solve functions and the local Ray instance shared by the Ray tests.

The functions here are pickled by value (`register_pickle_by_value`), so the Ray
workers, which cannot import this test module by name, still run them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from genlm.control.embedded import EMBEDDED_MODEL

try:
    import ray as _ray
except ImportError:  # the Ray tests skip themselves
    _ray = None
if _ray is not None:
    _ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
PROMPTS = ["The value of x is", "Let n be", "The answer is", "We get", "So y is", "Then z ="]


def local_ray():
    """A fresh local Ray of 2 CPUs for this test process (its own temp dir, so two xdist
    workers never share one); call `ray.shutdown()` when done."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=tempfile.mkdtemp(prefix="ray", dir="/tmp"),
    )
    return ray


def setup_llm():
    from genlm.control import PromptedLLM

    return PromptedLLM.from_name(EMBEDDED_MODEL)


async def solve_regex(llm, prompt, seed):
    """A short regex-constrained SMC run; raises for the prompt "boom"."""
    from genlm.control import AWRS

    if prompt == "boom":
        raise ValueError("boom: this problem is broken")
    llm = llm.spawn()
    llm.set_prompt_from_str(prompt)
    seqs = await AWRS(llm, llm.constrain(regex=r" [0-9]\.")).smc(
        n_particles=4, ess_threshold=0.5, max_tokens=6, seed=seed
    )
    return sorted(seqs.decoded_posterior.items()), float(seqs.log_ml)


def setup_empty():
    return {}


def setup_fails():
    raise OSError("no model here")


async def solve_echo(state, problem, seed):
    """`(problem, seed, pid)`; raises `KeyError` for the problem "missing"."""
    if problem == "missing":
        return state["missing"]
    return problem, seed, os.getpid()


async def solve_killing_once(state, problem, seed):
    """Kills its actor's process (SIGKILL) the first time problem "kill" runs, while
    the other problems sent to that actor still sleep; `problem` is (name, marker dir)."""
    name, marker_dir = problem
    marker = Path(marker_dir) / "killed"
    if name == "kill" and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(1.0)
    Path(marker_dir, f"ran-{name}-{os.getpid()}").write_text("")
    return name


async def solve_always_killing(state, problem, seed):
    """Kills its actor every time it is given the problem "oom"."""
    await asyncio.sleep(0.1)
    if problem == "oom":
        os.kill(os.getpid(), signal.SIGKILL)
    return problem


async def solve_waiting(state, problem, seed):
    """Returns at once for problem 0; the others write a "started" marker file and wait
    an hour, writing a "cancelled" one when they are cancelled; `problem` is
    (index, marker dir)."""
    index, marker_dir = problem
    if index == 0:
        return index
    Path(marker_dir, f"started-{index}").write_text(str(os.getpid()))
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        Path(marker_dir, f"cancelled-{index}").write_text("")
        raise
    return index


async def solve_returning_a_lock(state, problem, seed):
    """Returns something Ray cannot serialize for the problem "lock"."""
    import threading

    return threading.Lock() if problem == "lock" else problem


INTERRUPTED_SCRIPT = """
import asyncio
from toys import ray_setups as toys
from genlm.control.distributed import Pool

async def main():
    async with Pool(toys.setup_empty, actors=1, cpus_per_actor=0.5, env_vars=toys.ENV) as pool:
        await pool.gather(toys.solve_waiting, [(i, {marker_dir!r}) for i in (1, 2)], progress=False)

toys.local_ray()
asyncio.run(main())
"""


def setup_slow_to_replace():
    """Fast the first time; a replacement (the marker exists) writes "replacing" and
    then waits for the test's "release" marker (at most ten minutes), so the pool is
    closed while the replacement starts however slow the machine is. The marker
    directory comes from the actor's environment (`MARKER_DIR`)."""
    import time

    marker_dir = Path(os.environ["MARKER_DIR"])
    if (marker_dir / "first-setup").exists():
        (marker_dir / "replacing").write_text("")
        deadline = time.monotonic() + 600
        while not (marker_dir / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    (marker_dir / "first-setup").write_text("")
    return {}


async def solve_killing(state, problem, seed):
    """Kills its actor for the problem "kill"; sleeps a second otherwise."""
    if problem == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(1.0)
    return problem


async def solve_slowly(state, problem, seed):
    """Writes a "started" marker naming its pid, sleeps a second, returns the problem;
    `problem` is (name, marker dir)."""
    name, marker_dir = problem
    Path(marker_dir, f"started-{name}-{os.getpid()}").write_text("")
    await asyncio.sleep(1.0)
    return name
