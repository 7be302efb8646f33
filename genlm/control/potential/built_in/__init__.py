"""Built-in potentials: language models and constraints."""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "PromptedLLM": "genlm.control.lm.llm",
    "ByteLLM": "genlm.control.lm.bytelm",
    "WCFG": "genlm.control.constraints.cfg.wcfg",
    "BoolCFG": "genlm.control.constraints.cfg.wcfg",
    "WFSA": "genlm.control.constraints.fsa.wfsa",
    "BoolFSA": "genlm.control.constraints.fsa.wfsa",
    "JsonSchema": "genlm.control.constraints.json_schema.json",
    "CanonicalTokenization": "genlm.control.lm.canonical",
    "Ensemble": "genlm.control.lm.ensemble",
    "GuidedConstraint": "genlm.control.engine.guided",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
