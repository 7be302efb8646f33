"""Sequential Monte Carlo in three tiers.

- `state`: the frozen `PopulationState` (contexts, log weights, twists, done) and a
  step's `Proposals`;
- `kernel`: pure functions over them (reweighting by incremental weights and twists,
  the ESS decision, resampling, `log_ml`), no event loop and no model;
- `step` and `driver`: the model calls of a step and the one async loop, which
  passes every generator explicitly.

The public entry points stay `genlm.control.sampler.sequence` (`SMC`, `Sequences`)
and `genlm.control.sampler.smc` (`SequenceModel`, `smc_standard`).
"""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "PopulationState": "genlm.control.smc.state",
    "Proposals": "genlm.control.smc.state",
    "SequenceModel": "genlm.control.smc.particle",
    "Population": "genlm.control.smc.particle",
    "smc_standard": "genlm.control.smc.driver",
    "SMC": "genlm.control.smc.front",
    "Sequences": "genlm.control.smc.sequences",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
