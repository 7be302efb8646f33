"""Alias of `genlm.control.smc.record`, the module's home; this path serves its names on first access."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "StepRecord": "genlm.control.smc.record",
    "RunRecord": "genlm.control.smc.record",
    "RecordError": "genlm.control.smc.record",
    "Recorder": "genlm.control.smc.record",
    "token_text": "genlm.control.smc.record",
    "context_text": "genlm.control.smc.record",
    "strict_json": "genlm.control.smc.record",
    "FORMAT": "genlm.control.smc.record",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
