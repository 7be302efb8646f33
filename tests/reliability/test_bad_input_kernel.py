"""The bad-input catalogue of docs/bad-input.md for the SMC kernel and a particle's
step: one case per row, each a clear error naming the problem, raised before any
state is built or any sampler is called."""

from __future__ import annotations

import numpy as np
import pytest
from toys.reliability import ab_lm, assert_clear_error, undocumented

from genlm.control import direct_token_sampler
from genlm.control.constant import EOS
from genlm.control.sampler.smc import SequenceModel
from genlm.control.smc import kernel
from genlm.control.smc.state import PopulationState, Proposals


def _proposals(n: int) -> Proposals:
    return Proposals([(b"a",)] * n, np.zeros(n), np.zeros(n), np.zeros(n, bool), np.zeros(n, bool))


def _state(done=(False, False)) -> PopulationState:
    return PopulationState(((), ()), np.zeros(2), np.zeros(2), np.array(done))


CASES = {
    "kernel-state-shape": (
        lambda: PopulationState(((), ()), np.zeros(3), np.zeros(2), np.zeros(2, bool)),
        ValueError, r"population of 2 contexts needs arrays of shape \(2,\)",
    ),
    "kernel-proposals-length": (
        lambda: kernel.reweight(_state(), np.array([0, 1]), _proposals(1), EOS),
        ValueError, "one proposal per live particle: 2 live",
    ),
    "kernel-reweight-finished": (
        lambda: kernel.reweight(_state(done=(False, True)), np.array([0, 1]), _proposals(2), EOS),
        ValueError, "particle 1 has already finished",
    ),
    "kernel-live-range": (
        lambda: kernel.reweight(_state(), np.array([0, 2]), _proposals(2), EOS),
        ValueError, r"live must be particle indices in \[0, 2\)",
    ),
    "kernel-ancestors-range": (
        lambda: kernel.resample(_state(), np.array([0, -1])),
        ValueError, r"ancestors must be particle indices in \[0, 2\)",
    ),
    "kernel-ancestors-float": (
        lambda: kernel.resample(_state(), np.array([0.0, 1.0])),
        ValueError, "ancestors must be a 1-D array of particle indices, got float64",
    ),
    "step-rng-not-generator": (
        lambda: SequenceModel(direct_token_sampler(ab_lm()), max_tokens=3).step(rng=7),
        TypeError, "rng must be a numpy.random.Generator, got int",
    ),
}


@pytest.mark.parametrize("row", sorted(CASES))
async def test_bad_input_row(row):
    thunk, err, match = CASES[row]
    await assert_clear_error(thunk, err, match)


def test_every_row_is_documented():
    assert undocumented(CASES) == []
