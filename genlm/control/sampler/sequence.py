"""`SMC`, the front door of the algorithm, and `Sequences`, the weighted result.

Both live in `genlm.control.smc` (`front`, `sequences`); this module is their public
import path and loads them on first access, so that `sampler/` imports nothing of
`smc/` at module level (`smc/` drives the samplers and imports their types).
"""

from genlm.control._lazy import lazy_exports
from genlm.control.constant import EOS, EndOfSequence  # noqa: F401  (0.4.1 scripts import them from here)

_EXPORTS = {"SMC": "genlm.control.smc.front", "Sequences": "genlm.control.smc.sequences"}

__getattr__, _lazy_dir = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list:
    return sorted({*globals(), *_lazy_dir()})

__all__ = list(_EXPORTS)
