"""Public checks that a potential or a sampler is correct.

- Potentials: `check_potential` and the `assert_*` checks it runs.
- Samplers: see `genlm.control.testing.samplers`.
"""

from genlm.control.testing.potentials import (
    assert_autobatch_consistency,
    assert_autoreg_fact,
    assert_batch_consistency,
    assert_logw_next_consistency,
    check_potential,
)

__all__ = [
    "assert_autobatch_consistency",
    "assert_autoreg_fact",
    "assert_batch_consistency",
    "assert_logw_next_consistency",
    "check_potential",
]
