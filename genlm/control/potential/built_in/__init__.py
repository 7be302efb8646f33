"""Built-in potentials: language models and constraints."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
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
