"""Built-in potentials: language models and constraints."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "PromptedLLM": "genlm.control.potential.built_in.lm.llm",
    "ByteLLM": "genlm.control.potential.built_in.lm.bytelm",
    "WCFG": "genlm.control.potential.built_in.cfg.wcfg",
    "BoolCFG": "genlm.control.potential.built_in.cfg.wcfg",
    "WFSA": "genlm.control.potential.built_in.fsa.wfsa",
    "BoolFSA": "genlm.control.potential.built_in.fsa.wfsa",
    "JsonSchema": "genlm.control.potential.built_in.json_schema.json",
    "CanonicalTokenization": "genlm.control.potential.built_in.lm.canonical",
    "Ensemble": "genlm.control.potential.built_in.lm.ensemble",
    "GuidedConstraint": "genlm.control.potential.built_in.engine.guided",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
