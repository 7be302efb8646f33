"""Samplers: the proposal (token, set and unit samplers) and the SMC algorithm."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "TokenSampler": "genlm.control.sampler.token",
    "DirectTokenSampler": "genlm.control.sampler.token",
    "direct_token_sampler": "genlm.control.sampler.token",
    "SetTokenSampler": "genlm.control.sampler.set",
    "EagerSetSampler": "genlm.control.sampler.set",
    "TopKSetSampler": "genlm.control.sampler.set",
    "TrieSetSampler": "genlm.control.sampler.set",
    "eager_token_sampler": "genlm.control.sampler.set",
    "topk_token_sampler": "genlm.control.sampler.set",
    "AWRS": "genlm.control.sampler.awrs",
    "MultiTokenUnitSampler": "genlm.control.sampler.unit",
    "TokenSetBoundary": "genlm.control.sampler.unit",
    "FixedLengthBoundary": "genlm.control.sampler.unit",
    "CFGBoundary": "genlm.control.sampler.unit",
    "BoundaryPredicate": "genlm.control.sampler.unit",
    "SetSampler": "genlm.control.sampler.set",
    "SequenceModel": "genlm.control.sampler.smc",
    "flatten_units": "genlm.control.sampler.unit",
    "SMC": "genlm.control.sampler.sequence",
    "Sequences": "genlm.control.sampler.sequence",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
