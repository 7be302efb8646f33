"""The reliability tests' toys, by their former module name (they live in `toys.reliability`)."""

from toys.reliability import *  # noqa: F401, F403
from toys.reliability import (  # noqa: F401
    AB,
    BigramLM,
    CountCritic,
    NoBB,
    ab_lm,
    assert_clear_error,
    undocumented,
)
