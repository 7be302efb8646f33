"""A string `pattern` or `format` as a regex of its JSON spellings, for the JSON grammar.

`JsonSchema` reads a `pattern` (or a checked `format`) as a byte automaton built from
one full-match regex over the decoded text (`Pattern.regex`: for a `pattern`, the
search `[\\s\\S]*(?:body)[\\s\\S]*` unless anchored, with `$` as `\\n?`; for a
format, its `FORMATS` expression). Here that regex is parsed by the same reader
(`regex.syntax.parse_regex`, Python's parser with `re.ASCII`) and printed back with
every character set replaced by the JSON spellings of its characters: a character
written raw (code points from U+0020, other than `"` and `\\`), as a simple escape
(`\\n`, `\\/`, ...), as `\\uXXXX` (hex digits of either case, no surrogate), or as a
surrogate pair for a code point beyond U+FFFF. Sets, concatenation, alternation and
repeats keep their meaning, so the printed regex matches exactly the spellings of
the strings the automaton accepts: the language is ours by construction.

A pattern beside a length bound, and an intersection (a `pattern` with a
`format`), are not written (`Unwritable`): a regex has no intersection.
"""

from __future__ import annotations

from genlm.control.constraints.json_schema import CANONICAL_ESCAPES, SIMPLE_ESCAPES
from genlm.control.engine._guided_regex import emit
from genlm.control.engine._write_json_numbers import Unwritable

MAX_CP = 0x10FFFF
SURROGATES = range(0xD800, 0xE000)  # the UTF-16 surrogate code points, U+D800..U+DFFF
ANY_HEX = "[0-9a-fA-F]"
NOTHING = "[^\\x00-\\U0010ffff]"  # the empty class


def atom(cp: int) -> str:
    """Code point `cp` as a Python regex atom (also inside a class)."""
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    if 0x20 <= cp < 0x7F:
        return "\\" + c
    if cp < 0x100:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _clip(ranges, lo: int, hi: int) -> list:
    """`ranges` within `[lo, hi]`, surrogates removed."""
    out = []
    for a, b in ranges:
        for x, y in ((a, min(b, SURROGATES.start - 1)), (max(a, SURROGATES.stop), b)):
            x, y = max(x, lo), min(y, hi)
            if x <= y:
                out.append((x, y))
    return out


def _hex_digits(ds) -> str:
    chars = "".join(f"{d:x}" + (f"{d:X}" if d > 9 else "") for d in ds)
    return f"[{chars}]" if len(chars) > 1 else chars


def hex_span(lo: int, hi: int, width: int = 4) -> str:
    """The `width` hex digits (either case) spelling a value in `[lo, hi]`."""
    if width == 0:
        return ""
    size = 16 ** (width - 1)
    a, b = divmod(lo, size), divmod(hi, size)
    rest = f"{ANY_HEX}{{{width - 1}}}" if width > 1 else ""
    if a[0] == b[0]:
        return _hex_digits([a[0]]) + hex_span(a[1], b[1], width - 1)
    parts, first, last = [], a[0], b[0]
    if a[1] != 0:
        parts.append(_hex_digits([first]) + hex_span(a[1], size - 1, width - 1))
        first += 1
    tail = None
    if b[1] != size - 1:
        tail = _hex_digits([last]) + hex_span(0, b[1], width - 1)
        last -= 1
    if first <= last:
        parts.append(_hex_digits(range(first, last + 1)) + rest)
    if tail is not None:
        parts.append(tail)
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _raw_class(ranges) -> list:
    """The raw spellings (a one-class list, or empty) of the code points in `ranges`:
    from U+0020, other than `"` and `\\`."""
    raw = [
        r
        for a, b in _clip(ranges, 0x20, MAX_CP)
        for r in _clip([(a, b)], 0, 0x21)
        + _clip([(a, b)], 0x23, 0x5B)
        + _clip([(a, b)], 0x5D, MAX_CP)
    ]
    if not raw:
        return []
    return ["[" + "".join(atom(a) if a == b else f"{atom(a)}-{atom(b)}" for a, b in raw) + "]"]


def canonical_set(ranges) -> str:
    """One JSON string character in the canonical spelling (`_json_spelling`: raw, or
    the one escape a JSON writer uses) whose code point is in `ranges`."""
    alts = _raw_class(ranges)
    for esc, char in CANONICAL_ESCAPES.items():
        if any(a <= ord(char) <= b for a, b in ranges):
            alts.append("\\\\" + "".join(atom(ord(x)) for x in esc[1:]))
    return _union(alts) if alts else NOTHING


def complement(excluded: set) -> list:
    """The code point ranges outside `excluded`."""
    out, lo = [], 0
    for cp in sorted(excluded):
        if lo < cp:
            out.append((lo, cp - 1))
        lo = cp + 1
    return out + ([(lo, MAX_CP)] if lo <= MAX_CP else [])


def spelled_set(ranges) -> str:
    """One JSON string character (as written in the document) whose code point is in
    `ranges` (sorted, disjoint code point ranges)."""
    alts = _raw_class(ranges)
    inside = lambda cp: any(a <= cp <= b for a, b in ranges)  # noqa: E731
    simple = "".join(atom(ord(k)) for k, v in SIMPLE_ESCAPES.items() if inside(ord(v)))
    if simple:
        alts.append(f"\\\\[{simple}]")
    bmp = _clip(ranges, 0, 0xFFFF)
    if bmp:
        alts.append("\\\\u" + _union([hex_span(a, b) for a, b in bmp]))
    for a, b in _clip(ranges, 0x10000, MAX_CP):
        (ha, la), (hb, lb) = _pair(a), _pair(b)
        if ha == hb:
            pieces = [(ha, ha, la, lb)]
        else:
            pieces = [(ha, ha, la, 0xDFFF), (ha + 1, hb - 1, 0xDC00, 0xDFFF), (hb, hb, 0xDC00, lb)]
        for h1, h2, l1, l2 in pieces:
            if h1 <= h2:
                alts.append(f"\\\\u{hex_span(h1, h2)}\\\\u{hex_span(l1, l2)}")
    if not alts:
        return NOTHING
    return _union(alts)


def _union(alts: list) -> str:
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _pair(cp: int) -> tuple[int, int]:
    cp -= 0x10000
    return 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)


def spelled(node, canonical: bool = False) -> str:
    """The spellings of the strings of a `regex.syntax` tree, as a Python regex: the
    engine's text of the tree with each set written as its spellings (its canonical
    spelling alone where `canonical`)."""
    return emit(node, canonical_set if canonical else spelled_set)


def pattern_regex(pattern, canonical: bool = False) -> str:
    """The spellings (without quotes; the canonical ones where `canonical`) of the
    strings a `Pattern` accepts.

    Raises:
        Unwritable: the pattern is an intersection (no regex of its own).
    """
    from genlm.control.constraints.regex.syntax import parse_regex

    if getattr(pattern, "regex", None) is None:
        raise Unwritable("a string with both a pattern and a format")
    try:
        tree = parse_regex(pattern.regex)
    except (ValueError, TypeError) as e:  # pragma: no cover - the automaton was built from it
        raise Unwritable(f"a pattern the regex reader refuses: {e}") from None
    return spelled(tree, canonical)


__all__ = ["pattern_regex", "spelled_set", "hex_span"]
