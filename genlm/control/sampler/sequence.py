"""`SMC`, the front door of the algorithm, and `Sequences`, the weighted result.

Both live in `genlm.control.smc`; this module is their public import path.
"""

from genlm.control.constant import EOS, EndOfSequence  # noqa: F401  (0.4.1 scripts import them from here)
from genlm.control.smc.front import SMC
from genlm.control.smc.sequences import Sequences

__all__ = ["SMC", "Sequences"]
