"""The error an invalid JSON schema raises.

`InvalidSchemaError` is both a `ValueError` (what `JsonSchema` documents for a bad
schema) and a `jsonschema.exceptions.SchemaError` (what genlm-control 0.4.1 raised,
from `check_schema`), so code that catches either keeps working. Imported only when
a schema fails its metaschema check, so importing `JsonSchema` does not import
`jsonschema`.
"""

from __future__ import annotations

from jsonschema.exceptions import SchemaError


class InvalidSchemaError(SchemaError, ValueError):
    """A schema that is not valid under its dialect's metaschema (`str` is the message
    given; `path`, `schema_path` and `validator` are those of the metaschema error)."""

    @classmethod
    def from_error(cls, message: str, error: SchemaError) -> "InvalidSchemaError":
        return cls(message, validator=error.validator, path=error.path,
                   schema_path=error.schema_path)


__all__ = ["InvalidSchemaError"]
