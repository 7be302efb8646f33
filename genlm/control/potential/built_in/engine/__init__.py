"""The compiled token-mask engine (llguidance): `GuidedConstraint` over an LLM's
token ids, the engine's regex dialect, and `engine_coerce`, the planner's route to it.

Depends on `lm` (token maps), never the reverse: `PromptedLLM.constrain` reaches
this package through one late import.  Submodules are imported on demand.
"""
