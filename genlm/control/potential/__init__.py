"""Potentials: the target of generation, as a product of weights on sequences."""

from genlm.control._lazy import lazy_exports

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
    "PromptedLLM": "genlm.control.potential.built_in.llm",
    "ByteLLM": "genlm.control.potential.built_in.bytelm",
    "WCFG": "genlm.control.potential.built_in.wcfg",
    "BoolCFG": "genlm.control.potential.built_in.wcfg",
    "WFSA": "genlm.control.potential.built_in.wfsa",
    "BoolFSA": "genlm.control.potential.built_in.wfsa",
    "JsonSchema": "genlm.control.potential.built_in.json",
    "CanonicalTokenization": "genlm.control.potential.built_in.canonical",
    "Ensemble": "genlm.control.potential.built_in.ensemble",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
