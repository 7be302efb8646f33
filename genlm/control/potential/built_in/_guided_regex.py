"""Python regular expressions rewritten in the engine's (Rust `regex`) syntax, exactly.

`BoolFSA.from_regex` reads a pattern as `regex.fullmatch(pattern, text,
flags=regex.ASCII)`. Handing the pattern text to the engine would change its
meaning in places (`\\d`, `\\w`, `\\s` are Unicode classes in Rust, `[a&&b]` is a set
intersection, `[[a]]` a nested class). Instead the pattern is parsed by Python's own
parser and printed back from the parse tree in a form both dialects read the same:
every character as `\\x{HEX}`, every class as explicit ranges, every group as
`(?:...)`. A construct outside that form (inline flags, possessive or atomic
repeats, anchors, lookarounds, group references, lone surrogates) gives None, and
the caller keeps the generic automaton.
"""

from __future__ import annotations

import re
from typing import Any

try:  # pragma: no cover - import location depends on the Python version
    from re import _constants as C
    from re import _parser as P
except ImportError:  # pragma: no cover
    import sre_constants as C
    import sre_parse as P

MAX_CHAR = 0x10FFFF
_ASCII_CLASSES = {
    C.CATEGORY_DIGIT: [(0x30, 0x39)],
    C.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    C.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
}
_NEGATED = {
    C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT,
    C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
    C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
}


class _Unsupported(Exception):
    pass


def _char(c: int) -> str:
    if 0xD800 <= c <= 0xDFFF:
        raise _Unsupported("lone surrogate")
    return f"\\x{{{c:X}}}"


def complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges of characters outside `ranges` (sorted, disjoint) in 0..0x10FFFF."""
    out, lo = [], 0
    for a, b in sorted(ranges):
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= MAX_CHAR:
        out.append((lo, MAX_CHAR))
    return out


def _range_text(a: int, b: int) -> str:
    # Rust classes hold scalar values: split a range around the surrogate block.
    parts = []
    for lo, hi in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):
        if lo <= hi:
            parts.append(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}")
    return "".join(parts)


def _class(items: list) -> str:
    negate, ranges = False, []
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            ranges.append((av, av))
        elif op is C.RANGE:
            ranges.append(av)
        elif op is C.CATEGORY and av in _ASCII_CLASSES:
            ranges.extend(_ASCII_CLASSES[av])
        elif op is C.CATEGORY and av in _NEGATED:
            ranges.extend(complement(_ASCII_CLASSES[_NEGATED[av]]))
        else:
            raise _Unsupported(str(op))
    if negate:
        ranges = complement(ranges)
    if not ranges:
        return "[^\\x{0}-\\x{10FFFF}]"  # the empty class
    return "[" + "".join(_range_text(a, b) for a, b in ranges) + "]"


def _repeat(av: Any) -> str:
    lo, hi, sub = av
    if hi == C.MAXREPEAT:
        return f"(?:{_emit(sub)}){{{lo},}}"
    return f"(?:{_emit(sub)}){{{lo},{hi}}}"


def _node(op: Any, av: Any) -> str:
    if op is C.LITERAL:
        return _char(av)
    if op is C.NOT_LITERAL:
        return _class([(C.NEGATE, None), (C.LITERAL, av)])
    if op is C.ANY:
        return _class([(C.NEGATE, None), (C.LITERAL, 0x0A)])
    if op is C.IN:
        return _class(av)
    if op is C.BRANCH:
        return "(?:" + "|".join(_emit(b) for b in av[1]) + ")"
    if op is C.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        if add_flags or del_flags:
            raise _Unsupported("inline flags")
        return f"(?:{_emit(sub)})"
    if op in (C.MAX_REPEAT, C.MIN_REPEAT):  # laziness does not change a full match
        return _repeat(av)
    raise _Unsupported(str(op))


def _emit(parsed: Any) -> str:
    return "".join(_node(op, av) for op, av in parsed)


def engine_regex(pattern: str) -> str | None:
    """`pattern` in Rust `regex` syntax with the same full-match language over
    UTF-8 (ASCII `\\d`, `\\w`, `\\s`; `.` is any character but LF), or None when
    the pattern uses a construct this rewriting does not cover."""
    try:
        parsed = P.parse(pattern, re.ASCII)
    except re.error:
        return None
    if parsed.state.flags & ~(re.ASCII | re.UNICODE):
        return None
    try:
        return _emit(parsed)
    except _Unsupported:
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
