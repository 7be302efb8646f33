"""`benchmarks/_steps.py`: the benchmarks' milliseconds per step divide by the steps a
run took, which the returned contexts do not tell once resampling has kept only the
particles that finished early."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from toys.core import Tabular

from genlm.control import direct_token_sampler

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def counted_steps(monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("_steps").counted_steps


def _sampler():
    # "a" then EOS carries most of the mass; "bbbb" keeps its particles running 5 steps
    return direct_token_sampler(Tabular([b"a", b"b"], {(b"a",): 0.9, (b"b", b"b", b"b", b"b"): 0.1}))


def test_counted_steps_equal_the_runs_record_even_where_every_long_particle_was_resampled_away(counted_steps, tmp_path):
    sampler = _sampler()
    shorter = 0
    for seed in range(8):
        with counted_steps() as counted:
            seqs = asyncio.run(
                sampler.smc(n_particles=6, ess_threshold=1.0, max_tokens=10, seed=seed, json_path=str(tmp_path / f"{seed}.json"))
            )
        assert counted.most == len(seqs.record.steps)
        shorter += max(len(c) for c in seqs.contexts) < counted.most
    assert shorter  # the case the helper exists for: the returned contexts undercount


def test_runs_side_by_side_are_counted_apart_and_the_hook_is_removed(counted_steps, tmp_path):
    from genlm.control.smc import kernel

    decide = kernel.ancestors
    sampler = _sampler()

    async def both():
        return await asyncio.gather(
            *(
                sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=m, seed=s, json_path=str(tmp_path / f"{s}.json"))
                for m, s in ((3, 1), (10, 2))
            )
        )

    with counted_steps() as counted:
        runs = asyncio.run(both())
    took = sorted(len(seqs.record.steps) for seqs in runs)
    assert took[0] < took[1]
    assert sorted(counted.per_run.values()) == took
    assert counted.most == took[1]
    assert kernel.ancestors is decide
