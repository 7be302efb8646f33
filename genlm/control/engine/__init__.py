"""The compiled token-mask engine (llguidance): `GuidedConstraint` over an LLM's
token ids, `engine_coerce`, the planner's route to it, and `explain_coercion`, which
says whether a coercion is served by the engine, how exactly (`Exactness`) and why
(an `EngineDecision`, decided once in `_translate.engine_terms` and `route.decide`). Every translation into the
engine's terms lives here (`_translate`): a regex printed in the engine's syntax
(`_guided_regex`), a Lark grammar checked and printed (`_lark_exact`,
`_lark_lower`), a schema compared with the JSON whitelist (`_json_exact`) or written as the Lark
grammar of exactly its documents (`_write_json`, numbers in `_write_json_numbers`).

Depends on `constraints/` (`cfg`'s Lark reader, `json_schema`'s schema guard and
compiled schema, `regex`) and on the algebra, never on `lm/`: a model hands the engine
its token maps (any object with the `TokenVocabulary` attributes), and
`PromptedLLM.compiled_coercion` is the route the planner asks for. Submodules are imported on demand.
"""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "explain_coercion": "genlm.control.engine.route",
    "EngineDecision": "genlm.control.engine.decision",
    "Exactness": "genlm.control.engine.decision",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = list(_EXPORTS)
