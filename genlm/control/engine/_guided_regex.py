"""Python regular expressions rewritten in the engine's (Rust `regex`) syntax, exactly.

`BoolFSA.from_regex` reads a pattern as `re.fullmatch(pattern, text,
flags=re.ASCII)`. Handing the pattern text to the engine would change its meaning in
places (`\\d`, `\\w`, `\\s` are Unicode classes in Rust, `[a&&b]` is a set
intersection, `[[a]]` a nested class, `$` matches before a final newline in Python
only). Instead the pattern is read by `regex.syntax` (Python's own parser, with
`(?i)` and `(?s)` resolved into character sets, anchors and lookarounds refused)
and printed back from that tree in a form both dialects read the same: every class
as explicit `\\x{HEX}` ranges (surrogates left out, as UTF-8 has none), every group
as `(?:...)`, every repeat as `{lo,hi}`. The engine therefore compiles the very
tree our automaton is built from.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from genlm.control.constraints.regex.syntax import MAX_CHAR, parse_regex
from genlm.control.constraints.regex.syntax import complement as _complement


def _char(c: int) -> str:
    return f"\\x{{{c:X}}}"


def complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges of characters outside `ranges` in 0..0x10FFFF (sorted, merged)."""
    merged: list = []
    for a, b in sorted(ranges):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return list(_complement(merged))


def _range_text(a: int, b: int) -> str:
    # Rust classes hold scalar values: split a range around the surrogate block.
    parts = []
    for lo, hi in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):
        if lo <= hi:
            parts.append(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}")
    return "".join(parts)


def _set(ranges) -> str:
    body = "".join(_range_text(a, b) for a, b in ranges)
    if not body:
        return f"[^\\x{{0}}-\\x{{{MAX_CHAR:X}}}]"  # the empty class
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return body
    return f"[{body}]"


def emit(node: Any, print_set: Callable[[Any], str] | None = None) -> str:
    """The engine's text for a `regex.syntax` tree; `print_set` (default: the set's
    bytes as an engine class) writes each set's text."""
    print_set = print_set or _set
    kind = node[0]
    if kind == "set":
        return print_set(node[1])
    if kind == "cat":
        return "".join(emit(x, print_set) for x in node[1])
    if kind == "alt":
        return "(?:" + "|".join(emit(x, print_set) for x in node[1]) + ")"
    _, lo, hi, sub = node
    return f"(?:{emit(sub, print_set)}){{{lo},{'' if hi is None else hi}}}"


def engine_regex(pattern: str) -> str | None:
    """`pattern` in Rust `regex` syntax with the same full-match language over UTF-8
    (`re.ASCII` classes, flags resolved), or None when `regex.syntax` refuses it."""
    try:
        return emit(parse_regex(pattern))
    except (ValueError, TypeError):
        return None


_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_CLASS_TEXT = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[0-9A-Za-z_]",
    "W": "[^0-9A-Za-z_]",
    "s": "[\\t\\n\\x0B\\x0C\\r ]",
    "S": "[^\\t\\n\\x0B\\x0C\\r ]",
}


def ascii_classes(text: str) -> str:
    """`text` with `\\d \\D \\w \\W \\s \\S` written as ASCII classes (Python's
    `re.ASCII` reading, which Lark terminals get in `BoolCFG.from_lark`); other
    escapes are kept. Inside a class the result is a nested class, which the
    engine's syntax reads as a union."""
    return _ESCAPE.sub(lambda m: _CLASS_TEXT.get(m.group(1), m.group(0)), text)


__all__ = ["engine_regex", "complement", "ascii_classes"]
