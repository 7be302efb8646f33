"""The SMC algorithm's 0.4 import path: particles (`SequenceModel`) and the driver.

A particle is a context that a unit sampler extends one unit per step. Its log
weight after `t` steps is

    logw_t = start + Σ_s logw_s + critic.score(x_{≤t})

where `start = target.prefix([])`, `logw_s` is the sampler's properly weighted
increment and the critic term is the current twist (replaced at every step, so the
twists telescope). When the particle finishes — the sampler draws EOS, the
context reaches `max_tokens - 1` units, or `terminate_when` fires — EOS is
appended (forced with the sampler's `logw_eos` correction when it was not drawn)
and the twist becomes `critic.complete`, so a finished particle is properly
weighted for `target.complete(x) · critic.complete(x)` restricted to the sequences
that can end there.

The code lives in `genlm.control.smc`: the frozen population state, the pure
kernel (reweighting, the ESS decision, resampling) and the async driver
(`smc_standard`). After resampling every weight is set to the mean weight, so
`log_ml = log_mean_exp(final log weights)` is the standard unbiased estimate of
the normalizing constant (Del Moral 2004).
"""

from genlm.control._lazy import lazy_exports

# Imported on first access, so that `sampler/` imports nothing of `smc/` at module
# level (`smc/` drives the samplers and imports their types).
_EXPORTS = {
    "SequenceModel": "genlm.control.smc.particle",
    "Population": "genlm.control.smc.particle",
    "plain_predicate": "genlm.control.smc.particle",
    "smc_standard": "genlm.control.smc.driver",
    "step_all": "genlm.control.smc.particle",
    "step_many": "genlm.control.smc.particle",
    "should_resample": "genlm.control.smc.kernel",
    "SlotStreams": "genlm.control.smc.step",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
