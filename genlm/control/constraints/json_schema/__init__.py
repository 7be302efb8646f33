"""JSON Schema potential: `JsonSchema` (the module `json`), the schema compiler and
its guards, the incremental byte machine (strings, numbers, containers), and the
coercion that walks the machine over an LLM's tokens.

Named `json_schema` (not `json`), apart from the standard library's module and
from the 0.4 import path `genlm.control.potential.built_in.json` (an alias). The names other folders use (`check_document`, the schema
guard that `GuidedConstraint.from_json_schema` applies, and `ANNOTATIONS`, the
keywords with no effect on validity, which the engine's exactness check reads; the
compiled schema's node types, `compile_schema` and `SIMPLE_ESCAPES`, which the
engine's JSON grammar is written from) are
exported here, lazily; `JsonSchema` is exported lazily by
`genlm.control.potential.built_in`. Submodules are imported on demand.
"""

from genlm.control._lazy import lazy_exports

_EXPORTS = {
    "check_document": "genlm.control.constraints.json_schema._json_guard",
    "ANNOTATIONS": "genlm.control.constraints.json_schema._json_schema",
    # the compiled schema, which engine/_write_json writes as a grammar
    "compile_schema": "genlm.control.constraints.json_schema._json_schema",
    "Node": "genlm.control.constraints.json_schema._json_schema",
    "Lit": "genlm.control.constraints.json_schema._json_schema",
    "Num": "genlm.control.constraints.json_schema._json_schema",
    "Str": "genlm.control.constraints.json_schema._json_schema",
    "Obj": "genlm.control.constraints.json_schema._json_schema",
    "Arr": "genlm.control.constraints.json_schema._json_schema",
    "SIMPLE_ESCAPES": "genlm.control.constraints.json_schema._json_string",
    # how documents are spelled (`JsonSchema(spelling=...)`), read by engine/ and the CLI
    "SPELLINGS": "genlm.control.constraints.json_schema._json_spelling",
    "DEFAULT_SPELLING": "genlm.control.constraints.json_schema._json_spelling",
    "CANONICAL_ESCAPES": "genlm.control.constraints.json_schema._json_spelling",
    "check_spelling": "genlm.control.constraints.json_schema._json_spelling",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
