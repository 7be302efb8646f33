"""Potentials: the target of generation, as a product of weights on sequences."""

from genlm.control._lazy import lazy_exports
from genlm.control.potential.built_in import _EXPORTS as BUILT_IN

_EXPORTS = {
    "Potential": "genlm.control.potential.base",
    "SparseLogws": "genlm.control.potential.base",
    "VocabTables": "genlm.control.potential.tables",
    "Product": "genlm.control.potential.product",
    "Tempered": "genlm.control.potential.reweight",
    "Normalized": "genlm.control.potential.reweight",
    "Coerced": "genlm.control.potential.coerce",
    "AutoBatchedPotential": "genlm.control.potential.autobatch",
    "MultiProcPotential": "genlm.control.potential.multi_proc",
    "HarmonyPotential": "genlm.control.reasoning.harmony",
    "HarmonyChat": "genlm.control.reasoning.harmony",
    "ThinkPotential": "genlm.control.reasoning.think",
    **BUILT_IN,
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
