"""Public checks that a potential or a sampler is correct.

- Potentials: `check_potential` and the `assert_*` checks it runs.
- Samplers: `assert_properly_weighted` and `enumerate_sampler` (exact enumeration
  of a sampler's random paths through its `draw` choices).
- Targets: `enumerate_target` (the exact `log Z` and posterior of SMC's target on a
  small problem) and `sampler_target` (what a sampler's SMC estimates, exactly).
"""

from genlm.control.testing.exact import (
    ExactTarget,
    SequenceLimitExceeded,
    enumerate_target,
    sampler_target,
)
from genlm.control.testing.potentials import (
    assert_autobatch_consistency,
    assert_autoreg_fact,
    assert_batch_consistency,
    assert_logw_next_consistency,
    check_potential,
)
from genlm.control.testing.samplers import (
    PathLimitExceeded,
    assert_properly_weighted,
    assert_weights_match,
    enumerate_sampler,
    expected_logws,
)

__all__ = [
    "ExactTarget",
    "SequenceLimitExceeded",
    "enumerate_target",
    "sampler_target",
    "assert_autobatch_consistency",
    "assert_autoreg_fact",
    "assert_batch_consistency",
    "assert_logw_next_consistency",
    "check_potential",
    "PathLimitExceeded",
    "assert_properly_weighted",
    "assert_weights_match",
    "enumerate_sampler",
    "expected_logws",
]
