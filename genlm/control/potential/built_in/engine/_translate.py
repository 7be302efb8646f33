"""A constraint's engine form (`EngineSource`, as the constraint states it) in the
engine's terms, with whether the engine's language is provably the constraint's.

The constraints hand over their raw source (`BoolFSA.from_regex`: the pattern;
`BoolCFG.from_lark`: the grammar text and its parsed form; `JsonSchema`: the
schema); this module is the one place that translates it:

- a regex is printed in the engine's syntax from our own parse tree
  (`_guided_regex.engine_regex`), so it has one meaning on every path; a pattern our
  reader refuses has no engine form;
- a Lark grammar is checked by the lexing rule and printed from its compiled rules
  (`_lark_exact.engine_lark`);
- a schema is compared with the whitelist of shapes where the engine's documents are
  `JsonSchema`'s (`_json_exact.engine_difference`).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class EngineTerms(NamedTuple):
    """What the engine compiles (None: the constraint cannot be written in its terms)
    and why its language may differ from the constraint's (None: they are equal)."""

    source: Any
    inexact: Any


def engine_terms(form: Any) -> EngineTerms:
    """`form` (an `EngineSource`) in the engine's terms. A reason the form itself gives
    (`form.inexact`) is kept ahead of the one found here. A kind the engine does not
    know passes through unchanged, for the engine to refuse by name."""
    kind, source = form.kind, form.source
    if source is None:
        return EngineTerms(None, form.inexact)
    if kind == "regex":
        found = _regex(source)
        return EngineTerms(found.source, form.inexact or found.inexact)
    if kind == "lark":
        found = _lark(source, form.parsed)
        return EngineTerms(found.source, form.inexact or found.inexact)
    if kind == "json_schema":
        return EngineTerms(source, form.inexact or _json_difference(source))
    return EngineTerms(source, form.inexact)


def _regex(pattern: Any) -> EngineTerms:
    """The pattern printed from our parse tree, or None with our reader's refusal."""
    from genlm.control.potential.built_in.engine._guided_regex import emit
    from genlm.control.potential.built_in.regex.syntax import parse_regex

    try:
        return EngineTerms(emit(parse_regex(pattern)), None)
    except (ValueError, TypeError) as e:
        return EngineTerms(None, str(e))


def _lark(text: Any, parsed: Any) -> EngineTerms:
    from genlm.control.potential.built_in.engine._lark_exact import engine_lark

    if parsed is None:
        if not isinstance(text, str):
            return EngineTerms(None, f"a Lark grammar must be a str, got {type(text).__name__}")
        from genlm.control.potential.built_in.cfg import read_lark

        try:
            parsed = read_lark(text)
        except (ValueError, TypeError) as e:
            return EngineTerms(None, f"the grammar is not read as BoolCFG.from_lark reads it: {e}")
    exact = engine_lark(parsed)
    return EngineTerms(exact.text, exact.inexact)


def _json_difference(schema: Any) -> Any:
    from genlm.control.potential.built_in.engine._json_exact import engine_difference

    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None  # not JSON: the engine refuses it by name
    if not isinstance(schema, (dict, bool)):
        return None  # the engine refuses it by name
    return engine_difference(schema)


__all__ = ["EngineTerms", "engine_terms"]
