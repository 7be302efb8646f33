"""What to change in a constraint so that its texts finish in fewer tokens: the
`length_hint()` of each constraint class, read by the zero-weight warning
(`smc.deaths.length_hints`) when particles reach `max_tokens` unable to finish."""

from __future__ import annotations

import re


def json_hint(spelling: str, where: str = "JsonSchema") -> str:
    """For a JSON schema constraint in `spelling` (`where` names its constructor)."""
    if spelling == "any":
        return (
            f"{where} with spelling='any' lets the model write whitespace outside "
            "strings without end: JsonSchema(schema, spelling='canonical') or 'compact' does not"
        )
    return (
        f"{where} with spelling={spelling!r} writes no whitespace; bound the schema's "
        "strings and arrays (maxLength, maxItems) so that documents are shorter"
    )


def lark_hint(grammar: str | None, where: str = "the Lark grammar") -> str:
    """For a Lark grammar (its text, when known)."""
    if grammar is not None and re.search(r"^\s*%ignore\b", grammar, re.M):
        return (
            f"{where} %ignore's whitespace, which the model may write without end: "
            "write the whitespace the language needs in the rules instead, and bound "
            "repeats (x~1..4 instead of x*)"
        )
    return f"bound the repeats of {where} (x~1..4 instead of x* or x+)"


def regex_hint(where: str = "the regex") -> str:
    """For a regular expression."""
    return f"a tighter pattern than {where}, with bounded repeats ({{1,8}} instead of * or +)"


__all__ = ["json_hint", "lark_hint", "regex_hint"]
