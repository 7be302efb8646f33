"""Alias of `genlm.control.constraints.json_schema.json`, kept so the import
path from before the subpackage split, `genlm.control.potential.built_in.json`,
works: it only re-exports that module's public names."""

from genlm.control.constraints.json_schema.json import JsonSchema

__all__ = ["JsonSchema"]
