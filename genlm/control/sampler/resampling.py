"""Alias of `genlm.control.smc.resampling`, the module's home; this path serves its names on first access."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "RESAMPLING_METHODS": "genlm.control.smc.resampling",
    "Resampler": "genlm.control.smc.resampling",
    "Scheme": "genlm.control.smc.resampling",
    "ess": "genlm.control.smc.resampling",
    "get_resampler": "genlm.control.smc.resampling",
    "get_resampling_fn": "genlm.control.smc.resampling",
    "log_mean_exp": "genlm.control.smc.resampling",
    "multinomial": "genlm.control.smc.resampling",
    "multinomial_resample": "genlm.control.smc.resampling",
    "normalized_weights": "genlm.control.smc.resampling",
    "offspring_counts": "genlm.control.smc.resampling",
    "residual": "genlm.control.smc.resampling",
    "residual_resample": "genlm.control.smc.resampling",
    "stratified": "genlm.control.smc.resampling",
    "stratified_resample": "genlm.control.smc.resampling",
    "systematic": "genlm.control.smc.resampling",
    "systematic_resample": "genlm.control.smc.resampling",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
