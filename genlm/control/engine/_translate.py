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
  `JsonSchema`'s (`_json_exact.engine_difference`); off the list, its compiled form
  is written as a Lark grammar of exactly its documents (`_write_json`) and goes
  through the Lark translation, so the engine gets a grammar (kind "lark") whose
  language is proven `JsonSchema`'s; where a grammar only bounds the language (a
  bounded `number`; a schema read as a superset on prefixes), the grammars go with
  the exact checks that close the gap (kind "json_checked", a `CheckedSource`,
  served by `_json_checked.CheckedConstraint`); where all fails, the whitelist's
  reason stands.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class EngineTerms(NamedTuple):
    """What the engine compiles (None: the constraint cannot be written in its terms),
    why its language may differ from the constraint's (None: they are equal), and the
    kind of grammar `source` is, where it is not the constraint's own (None: the same)."""

    source: Any
    inexact: Any
    kind: Any = None


def engine_terms(form: Any, exact: bool = True) -> EngineTerms:
    """`form` (an `EngineSource`) in the engine's terms. A reason the form itself gives
    (`form.inexact`) is kept ahead of the one found here. A kind the engine does not
    know passes through unchanged, for the engine to refuse by name. `exact=False`
    (the `engine=True` opt-in) gives a schema off the whitelist to the engine as
    written, with the reason, instead of the grammar of its exact documents."""
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
        why = form.inexact or _json_difference(source)
        if exact and why is not None and form.inexact is None:
            grammar = _write_json(source)
            if grammar is not None:
                return EngineTerms(grammar, None, "lark" if isinstance(grammar, str) else "json_checked")
        return EngineTerms(source, why)
    return EngineTerms(source, form.inexact)


def _regex(pattern: Any) -> EngineTerms:
    """The pattern printed from our parse tree, or None with our reader's refusal."""
    from genlm.control.constraints.regex.syntax import parse_regex
    from genlm.control.engine._guided_regex import emit

    try:
        return EngineTerms(emit(parse_regex(pattern)), None)
    except (ValueError, TypeError) as e:
        return EngineTerms(None, str(e))


def _lark(text: Any, parsed: Any) -> EngineTerms:
    from genlm.control.engine._lark_exact import engine_lark

    if parsed is None:
        if not isinstance(text, str):
            return EngineTerms(None, f"a Lark grammar must be a str, got {type(text).__name__}")
        from genlm.control.constraints.cfg import read_lark

        try:
            parsed = read_lark(text)
        except (ValueError, TypeError) as e:
            return EngineTerms(None, f"the grammar is not read as BoolCFG.from_lark reads it: {e}")
    exact = engine_lark(parsed)
    return EngineTerms(exact.text, exact.inexact)


def _json_difference(schema: Any) -> Any:
    from genlm.control.engine._json_exact import engine_difference

    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None  # not JSON: the engine refuses it by name
    if not isinstance(schema, (dict, bool)):
        return None  # the engine refuses it by name
    return engine_difference(schema)


def _write_json(schema: Any) -> Any:
    """The engine grammar of exactly `schema`'s documents (a str), or the grammars
    that bound them (a `CheckedSource`), or None where none is written or proven
    (see `_write_json`; the whitelist's reason then stands).
    Kept per schema (its JSON text), since the proof costs up to seconds."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None
    try:
        key = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _GRAMMARS:
        return _GRAMMARS[key]
    text = _written(schema)
    if key is not None:
        if len(_GRAMMARS) >= 64:  # a few schemas, each coerced many times
            _GRAMMARS.pop(next(iter(_GRAMMARS)))
        _GRAMMARS[key] = text
    return text


_GRAMMARS: dict = {}  # schema JSON -> its proven engine grammar (or None)


def _written(schema: Any) -> Any:
    """The proven grammar (a str), or a `CheckedSource` (grammars bounding the
    language, served with exact checks: a bounded number, or a schema read as a
    superset on prefixes), or None."""
    from genlm.control.constraints.json_schema import compile_schema
    from genlm.control.engine._json_checked import CheckedSource
    from genlm.control.engine._write_json import (
        NeedsCheck,
        Unwritable,
        schema_grammar,
    )

    try:
        compiled = compile_schema(schema)
    except (ValueError, TypeError):
        return None
    try:
        try:
            text = _proven(schema_grammar(compiled.root))
            if text is None or not compiled.inexact:
                return text
            return CheckedSource(text, None)  # EOS checks the whole document
        except NeedsCheck:
            sub = _proven(schema_grammar(compiled.root, "sub"))
            try:  # exact on every spelling without an exponent, where the bounds allow
                sup, gated = _proven(schema_grammar(compiled.root, "gated")), True
            except NeedsCheck:
                sup, gated = None, False
            if sup is None:
                sup, gated = _proven(schema_grammar(compiled.root, "sup")), False
            return None if sup is None or sub is None else CheckedSource(sup, sub, gated)
    except Unwritable:
        return None


def _proven(text: str) -> str | None:
    found = _lark(text, None)
    return found.source if found.inexact is None else None


__all__ = ["EngineTerms", "engine_terms"]
