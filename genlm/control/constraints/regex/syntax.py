"""Python regular expressions read into a small tree of character sets, with limits.

A pattern is parsed by Python's own parser (`re._parser`), so it means what it
means to `re.fullmatch(pattern, text, flags=re.ASCII)`, and is rewritten into four
node kinds:

    ("set", ranges)          one character from sorted, disjoint code point ranges
    ("cat", [node, ...])     concatenation (the empty one matches "")
    ("alt", [node, ...])     alternation
    ("rep", lo, hi, node)    lo..hi repeats (hi None: unbounded)

Flags are resolved here (`(?i)` folds ASCII letters, `(?s)` makes `.` match LF), so
the automaton compiler sees only sets. Constructs that no finite automaton over the
whole string expresses (anchors, lookarounds, group references, possessive and
atomic repeats, Unicode/locale flags) are a `ValueError` naming the construct and
its position. Hostile input is bounded before anything is built: the nesting depth
of groups, and the expanded size (the number of character positions after
unrolling every counted repeat) are checked against limits.
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
MAX_DEPTH = 100  # groups nested deeper than this are refused before parsing
_ASCII = {
    C.CATEGORY_DIGIT: ((0x30, 0x39),),
    C.CATEGORY_WORD: ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    C.CATEGORY_SPACE: ((0x09, 0x0D), (0x20, 0x20)),
}
_NEGATED = {
    C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT,
    C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
    C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
}
# Refused parse-tree operators: the name each gets in the error, and the kinds
# `construct_positions` reports for it.
_REFUSED = {
    C.AT: ("anchors (^, $, \\A, \\Z, \\b, \\B)", ("anchor",)),
    C.ASSERT: ("lookahead/lookbehind assertions", ("lookahead", "lookbehind")),
    C.ASSERT_NOT: (
        "negative lookahead/lookbehind assertions",
        ("negative lookahead", "negative lookbehind"),
    ),
    C.GROUPREF: ("group references (backreferences)", ("group reference",)),
    C.GROUPREF_EXISTS: ("conditional group references", ("conditional group reference",)),
}
for _name, _what in (("POSSESSIVE_REPEAT", "possessive repeat"), ("ATOMIC_GROUP", "atomic group")):
    if hasattr(C, _name):  # Python >= 3.11
        _REFUSED[getattr(C, _name)] = (_what + "s", (_what,))
_FLAG = ("Unicode (?u) or locale (?L) flags (classes here are ASCII)", ("flag",))


def _fail(pattern: str, what: str, pos: int | None) -> ValueError:
    where = f" at position {pos}" if pos is not None else ""
    return ValueError(
        f"regex {short_pattern(pattern)} uses {what}{where}, which a finite automaton "
        "over the whole string does not express"
    )


def short_pattern(pattern: str) -> str:
    """`pattern` quoted for a message, cut to 60 characters."""
    text = repr(pattern)
    return text if len(text) <= 60 else text[:57] + "...'"


# Positions of constructs, by a scan of the text (the parse tree has none) -------


def _skip_class(p: str, i: int) -> int:
    """The index after the class that starts at `p[i] == "["`."""
    i += 1
    if i < len(p) and p[i] == "^":
        i += 1
    if i < len(p) and p[i] == "]":
        i += 1
    while i < len(p) and p[i] != "]":
        i += 2 if p[i] == "\\" else 1
    return i + 1


def _group_kind(p: str, i: int) -> str | None:
    """The refused construct a group opening at `p[i] == "("` starts, if any."""
    head = p[i + 1 : i + 5]
    for prefix, what in (
        ("?=", "lookahead"),
        ("?!", "negative lookahead"),
        ("?<=", "lookbehind"),
        ("?<!", "negative lookbehind"),
        ("?P=", "group reference"),
        ("?(", "conditional group reference"),
        ("?>", "atomic group"),
    ):
        if head.startswith(prefix):
            return what
    if head.startswith("?"):
        flags = re.match(r"\?([a-zA-Z]*)", p[i + 1 :]).group(1)
        if "u" in flags or "L" in flags:
            return "flag"
    return None


def construct_positions(p: str) -> list[tuple[int, str]]:
    """`(position, kind)` of anchors, lookarounds, group references, possessive
    repeats, atomic groups and Unicode/locale flags in the text of `p`."""
    out, i, n = [], 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\" and i + 1 < n:
            d = p[i + 1]
            if d in "AZbB":
                out.append((i, "anchor"))
            elif d in "123456789":
                out.append((i, "group reference"))
            i += 2
        elif c == "[":
            i = _skip_class(p, i)
        elif c == "(":
            kind = _group_kind(p, i)
            if kind:
                out.append((i, kind))
            i += 2 if p[i + 1 : i + 2] == "?" else 1
        elif c in "^$":
            out.append((i, "anchor"))
            i += 1
        elif c in "*+?}" and p[i + 1 : i + 2] == "+":
            out.append((i + 1, "possessive repeat"))
            i += 2
        else:
            i += 1
    return out


def _position(pattern: str, kinds: tuple) -> int | None:
    for pos, kind in construct_positions(pattern):
        if kind in kinds:
            return pos
    return None


def _check_depth(pattern: str) -> None:
    depth = 0
    for i, c in enumerate(pattern):
        if c == "(" and (i == 0 or pattern[i - 1] != "\\"):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(
                    f"regex {short_pattern(pattern)} nests groups deeper than {MAX_DEPTH} "
                    f"(at position {i})"
                )
        elif c == ")" and depth:
            depth -= 1


# Parsing ---------------------------------------------------------------------


def parse_regex(pattern: str) -> Any:
    """The tree (see module docstring) of `re.fullmatch(pattern, ., flags=re.ASCII)`.

    Raises:
        TypeError: `pattern` is not a str.
        ValueError: invalid syntax (with its position), a refused construct (named,
            with its position), groups nested deeper than `MAX_DEPTH`, or a repeat
            count Python cannot represent.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a regex pattern must be a str, got {type(pattern).__name__}")
    _check_depth(pattern)
    try:
        parsed = P.parse(pattern, re.ASCII)
    except re.error as e:
        raise ValueError(f"invalid regex {short_pattern(pattern)}: {e}") from None
    except OverflowError as e:
        raise ValueError(
            f"invalid regex {short_pattern(pattern)}: a repeat count is too large ({e})"
        ) from None
    except RecursionError:  # pragma: no cover - _check_depth refuses such nesting first
        raise ValueError(f"regex {short_pattern(pattern)} nests too deeply") from None
    except ValueError as e:  # e.g. "ASCII and UNICODE flags are incompatible"
        raise _fail(pattern, f"{_FLAG[0]} ({e})", _position(pattern, _FLAG[1])) from None
    return _Reader(pattern).seq(_drop_edge_anchors(list(parsed), True, True), parsed.state.flags)


_AT_START = {C.AT_BEGINNING, C.AT_BEGINNING_STRING}  # ^ and \A
_AT_END = {C.AT_END, C.AT_END_STRING}  # $ and \Z


def _drop_edge_anchors(items: list, start: bool, end: bool) -> list:
    r"""`items` without the anchors a full match makes redundant: `^`/`\A` where
    nothing can come before them (the first item of the pattern, of each top-level
    branch, of a group that opens the pattern), `$`/`\Z` where nothing can come
    after them. A full match starts at the string's start and ends at its end, so
    there they always hold (`$` before a final newline too: the match must still
    reach the end). Anchors anywhere else stay refused."""
    items = list(items)
    if start and items and items[0][0] is C.AT and items[0][1] in _AT_START:
        items = items[1:]
    if end and items and items[-1][0] is C.AT and items[-1][1] in _AT_END:
        items = items[:-1]
    for k in {0, len(items) - 1} if items else ():
        op, av = items[k]
        first, last = start and k == 0, end and k == len(items) - 1
        if op is C.BRANCH:
            branches = [P.SubPattern(b.state, _drop_edge_anchors(b, first, last)) for b in av[1]]
            items[k] = (op, (av[0], branches))
        elif op is C.SUBPATTERN:
            group, add, remove, sub = av
            items[k] = (op, (group, add, remove, P.SubPattern(sub.state, _drop_edge_anchors(sub, first, last))))
    return items


class _Reader:
    def __init__(self, pattern: str):
        self.pattern = pattern

    def refuse(self, what: str, kinds: tuple = ()):
        return _fail(self.pattern, what, _position(self.pattern, kinds))

    def seq(self, items: Any, flags: int) -> Any:
        nodes = [self.node(op, av, flags) for op, av in items]
        return nodes[0] if len(nodes) == 1 else ("cat", nodes)

    def node(self, op: Any, av: Any, flags: int) -> Any:
        if op in _REFUSED:
            raise self.refuse(*_REFUSED[op])
        if op is C.LITERAL:
            return ("set", _fold(((av, av),), flags))
        if op is C.NOT_LITERAL:
            return ("set", complement(_fold(((av, av),), flags)))
        if op is C.ANY:
            return ("set", ((0, MAX_CHAR),) if flags & re.DOTALL else complement(((10, 10),)))
        if op is C.IN:
            return ("set", _class(av, flags))
        if op is C.BRANCH:
            return ("alt", [self.seq(b, flags) for b in av[1]])
        if op is C.SUBPATTERN:
            _group, add, remove, sub = av
            if add & (re.UNICODE | re.LOCALE):
                raise self.refuse(*_FLAG)
            return self.seq(sub, (flags | add) & ~remove)
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):  # laziness does not change a full match
            lo, hi, sub = av
            return ("rep", lo, None if hi == C.MAXREPEAT else hi, self.seq(sub, flags))
        raise self.refuse(f"construct {op}")


def complement(ranges) -> tuple:
    """The code points outside `ranges` (sorted, disjoint) in 0..0x10FFFF."""
    out, lo = [], 0
    for a, b in ranges:
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= MAX_CHAR:
        out.append((lo, MAX_CHAR))
    return tuple(out)


def normalize(ranges) -> tuple:
    """`ranges` sorted and merged into disjoint, non-adjacent ranges."""
    out: list = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def _fold(ranges, flags: int) -> tuple:
    """Under `re.IGNORECASE` (ASCII), `ranges` plus the other case of its ASCII letters."""
    if not flags & re.IGNORECASE:
        return normalize(ranges)
    extra = []
    for a, b in ranges:
        for lo, hi, shift in ((0x41, 0x5A, 32), (0x61, 0x7A, -32)):
            x, y = max(a, lo), min(b, hi)
            if x <= y:
                extra.append((x + shift, y + shift))
    return normalize(list(ranges) + extra)


def _class(items: Any, flags: int) -> tuple:
    negate, ranges = False, []
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            ranges.append((av, av))
        elif op is C.RANGE:
            ranges.append(tuple(av))
        elif op is C.CATEGORY and av in _ASCII:
            ranges.extend(_ASCII[av])
        elif op is C.CATEGORY and av in _NEGATED:
            ranges.extend(complement(_ASCII[_NEGATED[av]]))
        else:  # pragma: no cover - every class item of re.ASCII patterns is covered
            raise ValueError(f"unsupported class item {op} {av}")
    folded = _fold(ranges, flags)
    return complement(folded) if negate else folded


def expanded_size(node: Any, limit: int) -> int:
    """Character positions of `node` with every counted repeat unrolled (`x{lo,hi}`
    counts `max(lo, hi)` copies of `x`, `x{lo,}` counts `lo + 1`); stops counting
    once the total exceeds `limit` and returns a number above it."""
    kind = node[0]
    if kind == "set":
        return 1
    if kind in ("cat", "alt"):
        total = 0
        for sub in node[1]:
            total += expanded_size(sub, limit)
            if total > limit:
                return total
        return total
    _, lo, hi, sub = node
    copies = max(lo, 1) + 1 if hi is None else max(hi, 1)
    inner = expanded_size(sub, limit)
    return inner * copies if inner <= limit else inner


__all__ = [
    "parse_regex",
    "expanded_size",
    "complement",
    "normalize",
    "construct_positions",
    "short_pattern",
    "MAX_DEPTH",
]
