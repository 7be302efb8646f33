"""The compiled token-mask engine (llguidance): `GuidedConstraint` over an LLM's
token ids, and `engine_coerce`, the planner's route to it. Every translation into the
engine's terms lives here (`_translate`): a regex printed in the engine's syntax
(`_guided_regex`), a Lark grammar checked and printed (`_lark_exact`,
`_lark_lower`), a schema compared with the JSON whitelist (`_json_exact`) or written as the Lark
grammar of exactly its documents (`_json_grammar`, numbers in `_json_numbers`).

Depends on `lm` (token maps), `cfg` (the Lark reader), `json_schema` (the schema
guard) and `regex`, never the reverse: `PromptedLLM.constrain` reaches this package
through one late import. Submodules are imported on demand.
"""
