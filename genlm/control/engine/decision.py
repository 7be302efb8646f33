"""Whether the compiled engine serves a constraint, and how exactly: one outcome.

`_translate.engine_terms` decides it for a constraint's engine form, `route` adds
what the target and the engine itself say, and both the coercion
(`route.engine_coerce`) and `route.explain_coercion` read the same `EngineDecision`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple


class Exactness(Enum):
    """How the engine's language relates to the constraint's."""

    EXACT = "exact"
    """The engine's language is the constraint's (a regex, a Lark grammar passing the
    lexing rule, a schema on the whitelist or written as the grammar of its documents)."""
    CHECKED = "checked"
    """Grammars bounding the language, served with exact run-time checks on the
    tokens between them (kind "json_checked"); the coercion's values are the constraint's."""
    INEXACT = "inexact"
    """The engine's language may differ from the constraint's: taken only with `engine=True`."""
    UNWRITABLE = "unwritable"
    """No engine form: the constraint, its target or the engine refuses it."""


class EngineDecision(NamedTuple):
    """The engine's decision for one coercion.

    Attributes:
        exactness: how the engine's language relates to the constraint's.
        kind: what the engine compiles: "regex", "lark", "json_schema" or
            "json_checked" (a `CheckedSource`); a schema written as a grammar is "lark".
        source: what the engine compiles in that kind (None where `UNWRITABLE`).
        reason: why the engine's language is not (or is not alone) the constraint's;
            None where `EXACT`.
    """

    exactness: Exactness
    kind: str
    source: Any = None
    reason: str | None = None

    def takes_engine(self, engine: bool | None) -> bool:
        """Whether `coerce(..., engine=engine)` serves the constraint on the engine:
        `EXACT` and `CHECKED` unless `engine=False`, `INEXACT` only with `engine=True`."""
        if engine is False:
            return False
        if self.exactness is Exactness.INEXACT:
            return bool(engine)
        return self.exactness is not Exactness.UNWRITABLE


__all__ = ["EngineDecision", "Exactness"]
