"""Warnings point at the user's line: the line that awaits, runs or `run`s the call,
never a line of this package, asyncio or the worker thread of `run`."""

import asyncio
import inspect
import warnings

import pytest
from toys import AB, BoolPotential, ab_lm

from genlm.control import direct_token_sampler, run
from genlm.control.smc.deaths import ZeroWeightWarning


def _dying():
    never = BoolPotential(AB, lambda ctx: False, lambda ctx: False)
    return direct_token_sampler(ab_lm() * never)


def _caught(action):
    """The ZeroWeightWarnings `action()` raises, and the line `action` was written on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [w for w in caught if w.category is ZeroWeightWarning]


def _line_of(text):
    lines, start = inspect.getsourcelines(_cases)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _cases():
    sampler = _dying()

    def via_asyncio_run():
        return asyncio.run(sampler.smc(3, 0.5, 4, seed=0))  # mark: asyncio.run

    async def awaited():
        return await sampler.smc(3, 0.5, 4, seed=0)  # mark: awaited

    def via_run():
        return run(sampler.smc(3, 0.5, 4, seed=0))  # mark: run

    async def notebook_cell():
        return run(sampler.smc(3, 0.5, 4, seed=0))  # mark: in a running loop

    return {
        "asyncio.run": (via_asyncio_run, "mark: asyncio.run"),
        "await": (lambda: asyncio.run(awaited()), "mark: awaited"),
        "run": (via_run, "mark: run"),
        "run in a running loop": (lambda: asyncio.run(notebook_cell()), "mark: in a running loop"),
    }


@pytest.mark.parametrize("case", ["asyncio.run", "await", "run", "run in a running loop"])
def test_a_run_whose_particles_all_die_warns_at_the_users_line(case):
    action, mark = _cases()[case]
    caught = _caught(action)
    assert len(caught) == 1
    assert (caught[0].filename, caught[0].lineno) == (__file__, _line_of(mark))
