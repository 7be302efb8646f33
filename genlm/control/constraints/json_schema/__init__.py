"""JSON Schema potential: `JsonSchema` (the module `json`), the schema compiler and
its guards, the incremental byte machine (strings, numbers, containers), and the
coercion that walks the machine over an LLM's tokens.

Named `json_schema` (not `json`) so that the alias module `built_in/json.py` can keep
the 0.4 import path. The names other folders use (`check_document`, the schema
guard that `GuidedConstraint.from_json_schema` applies, and `ANNOTATIONS`, the
keywords with no effect on validity, which the engine's exactness check reads; the
compiled schema's node types, `compile_schema` and `SIMPLE_ESCAPES`, which the
engine's JSON grammar is written from) are
exported here, lazily; `JsonSchema` is exported lazily by
`genlm.control.potential.built_in`. Submodules are imported on demand.
"""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "check_document": "genlm.control.potential.built_in.json_schema._json_guard",
    "ANNOTATIONS": "genlm.control.potential.built_in.json_schema._json_schema",
    # the compiled schema, which engine/_json_grammar writes as a grammar
    "compile_schema": "genlm.control.potential.built_in.json_schema._json_schema",
    "Node": "genlm.control.potential.built_in.json_schema._json_schema",
    "Lit": "genlm.control.potential.built_in.json_schema._json_schema",
    "Num": "genlm.control.potential.built_in.json_schema._json_schema",
    "Str": "genlm.control.potential.built_in.json_schema._json_schema",
    "Obj": "genlm.control.potential.built_in.json_schema._json_schema",
    "Arr": "genlm.control.potential.built_in.json_schema._json_schema",
    "SIMPLE_ESCAPES": "genlm.control.potential.built_in.json_schema._json_string",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
