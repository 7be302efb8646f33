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
  reason stands. The whitelist was established for the spelling "any" (RFC 8259
  whitespace, every escape); a schema in another spelling ("compact", "canonical":
  `JsonSchema(spelling=...)`) always takes the written grammar, whose whitespace and
  escapes follow the spelling, and where none is written, the engine's own JSON with
  compact separators (inexact, with the reason).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from genlm.control._lru import LRU
from genlm.control.engine.decision import EngineDecision, Exactness

NOT_EXPRESSED = "the engine does not express this constraint exactly"
MAY_DIFFER = "the engine's language may differ"
CHECKED_AT_EOS = (
    "JsonSchema reads this schema as a superset on prefixes: the engine serves the grammar "
    "of that superset and the whole document is checked at EOS, as JsonSchema.complete does"
)
CHECKED_NUMBERS = (
    "a number with bounds other than a lower bound of 0: the engine serves grammars of a "
    "subset and a superset of its spellings, and the tokens between the two are checked exactly"
)


class Translated(NamedTuple):
    """A source in the engine's terms (None: it has none) and why the engine's
    language may differ from it (None: they are equal)."""

    source: Any
    inexact: Any


def engine_terms(form: Any, exact: bool = True) -> EngineDecision:
    """`form` (an `EngineSource`) in the engine's terms, with its `Exactness`. A reason
    the form itself gives (`form.inexact`) is kept ahead of the one found here. A kind
    the engine does not know passes through unchanged, for the engine to refuse by
    name. `exact=False` (the `engine=True` opt-in) gives a schema off the whitelist to
    the engine as written (`INEXACT`, with the reason), instead of the grammar of its
    exact documents."""
    kind, source = form.kind, form.source
    if source is None:
        return _decided(kind, None, form.inexact)
    if kind == "regex":
        found = _regex(source)
        return _decided(kind, found.source, form.inexact or found.inexact)
    if kind == "lark":
        found = _lark(source, form.parsed)
        return _decided(kind, found.source, form.inexact or found.inexact)
    if kind == "json_schema":
        spelling = form.spelling or "any"
        why = form.inexact or _json_difference(source, spelling)
        if exact and why is not None and form.inexact is None:
            grammar = _write_json(source, spelling)
            if isinstance(grammar, str):
                return EngineDecision(Exactness.EXACT, "lark", grammar)
            if grammar is not None:
                reason = CHECKED_AT_EOS if grammar.sub is None else CHECKED_NUMBERS
                return EngineDecision(Exactness.CHECKED, "json_checked", grammar, reason)
        return _decided(kind, _with_spelling(source, spelling), why)
    return _decided(kind, source, form.inexact)


def _decided(kind: str, source: Any, why: Any) -> EngineDecision:
    """EXACT where there is a source and no reason, INEXACT with a reason, else UNWRITABLE."""
    if source is None:
        reason = NOT_EXPRESSED + (f": {why}" if why is not None else "")
        return EngineDecision(Exactness.UNWRITABLE, kind, None, reason)
    if why is not None:
        return EngineDecision(Exactness.INEXACT, kind, source, f"{MAY_DIFFER}: {why}")
    return EngineDecision(Exactness.EXACT, kind, source)


def _regex(pattern: Any) -> Translated:
    """The pattern printed from our parse tree, or None with our reader's refusal."""
    from genlm.control.constraints.regex.syntax import parse_regex
    from genlm.control.engine._guided_regex import emit

    try:
        return Translated(emit(parse_regex(pattern)), None)
    except (ValueError, TypeError) as e:
        return Translated(None, str(e))


def _lark(text: Any, parsed: Any) -> Translated:
    from genlm.control.engine._lark_exact import engine_lark

    if parsed is None:
        if not isinstance(text, str):
            return Translated(None, f"a Lark grammar must be a str, got {type(text).__name__}")
        from genlm.control.constraints.cfg import read_lark

        try:
            parsed = read_lark(text)
        except (ValueError, TypeError) as e:
            return Translated(None, f"the grammar is not read as BoolCFG.from_lark reads it: {e}")
    exact = engine_lark(parsed)
    return Translated(exact.text, exact.inexact)


def _with_spelling(schema: Any, spelling: str) -> Any:
    """`schema` for the engine's own JSON in `spelling` (`_guided_engine.with_spelling`)."""
    from genlm.control.engine._guided_engine import with_spelling

    return with_spelling(schema, spelling) if isinstance(schema, dict) else schema


def _json_difference(schema: Any, spelling: str = "any") -> Any:
    from genlm.control.engine._json_exact import SPELLING_DIFFERS, engine_difference

    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None  # not JSON: the engine refuses it by name
    if not isinstance(schema, (dict, bool)):
        return None  # the engine refuses it by name
    if spelling != "any":
        return SPELLING_DIFFERS.format(spelling=spelling)
    return engine_difference(schema)


def _write_json(schema: Any, spelling: str = "any") -> Any:
    """The engine grammar of exactly `schema`'s documents (a str), or the grammars
    that bound them (a `CheckedSource`), or None where none is written or proven
    (see `_write_json`; the whitelist's reason then stands).
    Kept per schema and spelling (its JSON text and the spelling), since the proof
    costs up to seconds."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None
    try:
        key = spelling + ":" + json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _GRAMMARS:
        return _GRAMMARS.get(key)
    text = _written(schema, spelling)
    if key is not None:
        _GRAMMARS.put(key, text)
    return text


# "spelling:schema JSON" -> its proven engine grammar (or None): a few schemas, each
# coerced many times
_GRAMMARS: LRU[str, Any] = LRU(max_entries=64)


def _written(schema: Any, spelling: str = "any") -> Any:
    """The proven grammar (a str), or a `CheckedSource` (grammars bounding the
    language, served with exact checks: a bounded number, or a schema read as a
    superset on prefixes), or None."""
    from genlm.control.constraints.json_schema import compile_schema
    from genlm.control.engine._json_checked import CheckedSource
    from genlm.control.engine._write_json import Spelling, Written, schema_grammar

    try:
        compiled = compile_schema(schema)
    except (ValueError, TypeError):
        return None
    exact = schema_grammar(compiled.root, json_spelling=spelling)
    if exact.written is Written.GRAMMAR:
        text = _proven(exact.grammar)
        if text is None or not compiled.inexact:
            return text
        return CheckedSource(text, None)  # EOS checks the whole document
    if exact.written is Written.UNWRITABLE:
        return None
    sub = schema_grammar(compiled.root, Spelling.SUB, spelling)
    if sub.written is not Written.GRAMMAR:
        return None
    sub_text = _proven(sub.grammar)
    if sub_text is None:
        return None
    # exact on every spelling without an exponent, where the bounds allow
    sup, gated = schema_grammar(compiled.root, Spelling.GATED, spelling), True
    if sup.written is Written.UNWRITABLE:
        return None
    sup_text = _proven(sup.grammar) if sup.written is Written.GRAMMAR else None
    if sup_text is None:
        sup, gated = schema_grammar(compiled.root, Spelling.SUP, spelling), False
        if sup.written is not Written.GRAMMAR:
            return None
        sup_text = _proven(sup.grammar)
    return None if sup_text is None else CheckedSource(sup_text, sub_text, gated)


def _proven(text: str) -> str | None:
    found = _lark(text, None)
    return found.source if found.inexact is None else None


__all__ = ["engine_terms"]
