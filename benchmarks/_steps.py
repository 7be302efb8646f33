"""How many steps an SMC run took, for the benchmarks' milliseconds per step.

A run's returned contexts do not say how many steps it ran: a resampling near the end
can replace every long particle with copies of one that finished early, so the
longest returned context is then shorter than the run (a run of 160 steps returned
contexts of at most 14 tokens here, and its "ms per step" came out 11× too high).
`counted_steps` counts the steps themselves: the SMC loop makes one resampling
decision (`genlm.control.smc.kernel.ancestors`) per step and run.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Iterator


class StepCounts:
    """Steps per run while `counted_steps` is active (a run is told by its generator)."""

    def __init__(self) -> None:
        self.per_run: collections.Counter = collections.Counter()

    @property
    def most(self) -> int:
        """The most steps any run took (at least 1): the steps of runs made side by side."""
        return max(self.per_run.values(), default=0) or 1


@contextlib.contextmanager
def counted_steps() -> Iterator[StepCounts]:
    """Count the steps of the SMC runs made inside the block."""
    from genlm.control.smc import kernel

    counts = StepCounts()
    decide = kernel.ancestors

    def counting(state, rng, *args, **kwargs):
        counts.per_run[id(rng)] += 1
        return decide(state, rng, *args, **kwargs)

    kernel.ancestors = counting
    try:
        yield counts
    finally:
        kernel.ancestors = decide
