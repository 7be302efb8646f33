"""JSON Schema potential: `JsonSchema` (the module `json`), the schema compiler and
its guards, the incremental byte machine (strings, numbers, containers), and the
coercion that walks the machine over an LLM's tokens.

Named `json_schema` (not `json`) so that the alias module `built_in/json.py` can keep
the 0.4 import path.  Submodules are imported on demand; the public names are
exported lazily by `genlm.control.potential.built_in`.
"""
