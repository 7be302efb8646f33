"""JSON strings read byte by byte: UTF-8, escapes, length, `pattern` and value sets.

A string is read as code points: raw UTF-8 bytes (validated) or escapes (`\\n`,
`\\uXXXX`, surrogate pairs `\\uD83D\\uDE00` as one code point; a lone surrogate
escape is rejected). While a code point is incomplete the set of code points it
can still become is a union of ranges, and the string is live iff one of them
keeps the constraints satisfiable: a prefix of an allowed value, or a `pattern`
automaton state from which a final state is reachable within the length bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from genlm.control.constraints.json_schema._json_alternatives import top_alternatives, unwrap
from genlm.control.constraints.regex.compile import byte_dfa, utf8_length

try:  # pragma: no cover - import location depends on the Python version
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants
    import sre_parse

MAX_CP = 0x10FFFF
SIMPLE_ESCAPES = {"\"": "\"", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
HEX = frozenset("0123456789abcdefABCDEF")
_UTF8_RANGES = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, MAX_CP))


class Pattern:
    """`re.search(pattern, s)` over the UTF-8 bytes of `s`, as a byte DFA with int states.

    Classes `\\d`, `\\w`, `\\s` are ASCII (as in ECMA-262); a leading `^` and a
    trailing `$` anchor the match (`$` also before a final newline, as in `re`).
    `regex` is the full-match regex (`re.ASCII`) the automaton was built from (None
    for an intersection), which the engine's JSON grammar prints (`engine/_write_json_strings`).
    """

    def __init__(self, source: str, start: int, finals: frozenset, arcs: list[dict],
                 regex: str | None = None):
        self.source, self.start, self.finals, self.arcs = source, start, finals, arcs
        self.regex = regex
        self._targets: dict = {}
        self._lengths: dict = {}

    @classmethod
    def compile(cls, pattern: str, where: str = "#") -> "Pattern":
        """Raises:
            ValueError: an invalid pattern, or one whose estimated automaton size
                (`pattern_size`) exceeds `MAX_PATTERN_SIZE`, checked before building it.
        """
        parts = []
        for alternative in top_alternatives(pattern):
            body, head, tail = _anchors(unwrap(alternative), where)
            parts.append(("" if head else r"[\s\S]*") + f"(?:{body})" + ("\n?" if tail else r"[\s\S]*"))
        full = parts[0] if len(parts) == 1 else "|".join(f"(?:{p})" for p in parts)
        try:
            initial, finals, arcs = byte_dfa(full)
        except ValueError as e:
            raise ValueError(f"pattern {pattern!r} at {where}: {e}") from None
        except RecursionError:
            raise ValueError(f"pattern {pattern!r} at {where} is nested too deeply") from None
        return cls._numbered(pattern, initial, finals, arcs, full)

    @classmethod
    def exact(cls, regex: str, name: str) -> "Pattern":
        """`re.fullmatch(regex, s, re.ASCII)` as a byte automaton (no anchors, no
        trailing newline)."""
        initial, finals, arcs = byte_dfa(regex)
        return cls._numbered(name, initial, finals, arcs, regex)

    @classmethod
    def _numbered(cls, source: str, initial, finals, arcs: dict, regex: str | None = None) -> "Pattern":
        ids = {s: i for i, s in enumerate([initial, *(s for s in arcs if s != initial)])}
        table = [{} for _ in ids]
        for s, out in arcs.items():
            table[ids[s]] = {b: ids[t] for b, t in out.items()}
        return cls(source, ids[initial], frozenset(ids[s] for s in finals), table, regex)

    def intersect(self, other: "Pattern", max_states: int = 1 << 15) -> "Pattern":
        """The product automaton: strings matched by both (reachable pairs only).

        Raises:
            ValueError: the product has more than `max_states` states."""
        start = (self.start, other.start)
        arcs: dict = {start: {}}
        stack = [start]
        while stack:
            p, q = pair = stack.pop()
            out = arcs[pair]
            for b, p2 in self.arcs[p].items():
                q2 = other.arcs[q].get(b)
                if q2 is not None:
                    out[b] = nxt = (p2, q2)
                    if nxt not in arcs:
                        arcs[nxt] = {}
                        stack.append(nxt)
                        if len(arcs) > max_states:
                            raise ValueError(
                                f"the strings matching both {self.source!r} and "
                                f"{other.source!r} need more than {max_states} states"
                            )
        finals = {s for s in arcs if s[0] in self.finals and s[1] in other.finals}
        return Pattern._numbered(f"{self.source} & {other.source}", start, finals, arcs)

    def step(self, q: int, byte: int) -> int | None:
        return self.arcs[q].get(byte)

    def feed(self, q: int | None, data: bytes) -> int | None:
        for b in data:
            if q is None:
                return None
            q = self.arcs[q].get(b)
        return q

    def targets(self, q: int, ranges: tuple) -> frozenset:
        """States after reading one whole code point in `ranges` from `q`."""
        key = (q, ranges)
        hit = self._targets.get(key)
        if hit is None:
            out: set = set()
            for lo, hi in ranges:
                for a, b in _UTF8_RANGES:
                    if max(lo, a) <= min(hi, b):
                        self._walk(q, chr(max(lo, a)).encode(), chr(min(hi, b)).encode(), out)
            hit = self._targets[key] = frozenset(out)
        return hit

    def _walk(self, q: int, lo: bytes, hi: bytes, out: set) -> None:
        if not lo:
            out.add(q)
            return
        n = len(lo) - 1
        for b in range(lo[0], hi[0] + 1):
            nxt = self.arcs[q].get(b)
            if nxt is not None:
                sub_lo = lo[1:] if b == lo[0] else b"\x80" * n
                sub_hi = hi[1:] if b == hi[0] else b"\xbf" * n
                self._walk(nxt, sub_lo, sub_hi, out)

    def length_ok(self, q: int, count: int, min_len: int, max_len: int | None) -> bool:
        """Whether a final state is reachable from `q` after `d` more code points
        with `min_len ≤ count + d ≤ max_len`."""
        need = max(0, min_len - count)
        if max_len is None and need == 0:
            return True
        last = None if max_len is None else max_len - count
        key = (q, need, last)
        hit = self._lengths.get(key)
        if hit is None:
            hit = self._lengths[key] = self._search(q, need, last)
        return hit

    def _search(self, q: int, need: int, last: int | None) -> bool:
        """Whether `L_d ∩ finals ≠ ∅` for some `need ≤ d ≤ last` (None: no upper end),
        where `L_0 = closure({q})` and `L_{d+1}` = the states one code point after `L_d`.

        `L_d` is a function of `L_{d-1}`, so the layers repeat with some period `p` from
        some `d0` on; the walk stops at the first repeat and reads every later `d`
        off the cycle (`L_d = L_{d0 + (d - d0) mod p}`), so its cost is the number of
        distinct layers, not `need` or `last` (which may be 10**9)."""
        layer, first, hits = self._closure({q}), {}, []
        d = 0
        while layer not in first:
            if last is not None and d > last:
                return False
            hit = bool(layer & self.finals)
            if hit and d >= need:
                return True
            first[layer] = d
            hits.append(hit)
            layer = self._closure({t for s in layer for b, t in self.arcs[s].items() if not 0x80 <= b < 0xC0})
            d += 1
        d0 = first[layer]
        period = d - d0
        lo = max(need, d)
        for r in range(period):
            if hits[d0 + r]:
                k = lo + (d0 + r - lo) % period  # the first d ≥ lo on this phase of the cycle
                if last is None or k <= last:
                    return True
        return False

    def _closure(self, states: set) -> frozenset:
        """`states` plus what continuation bytes (0x80..0xBF) reach from them."""
        out, stack = set(states), list(states)
        while stack:
            s = stack.pop()
            for b, t in self.arcs[s].items():
                if 0x80 <= b < 0xC0 and t not in out:
                    out.add(t)
                    stack.append(t)
        return frozenset(out)


def _anchors(pattern: str, where: str) -> tuple[str, bool, bool]:
    if not isinstance(pattern, str):
        raise ValueError(f"pattern at {where} must be a string")
    try:
        parsed = sre_parse.parse(pattern)
    except re.error as e:
        raise ValueError(f"invalid pattern {pattern!r} at {where}: {e}") from None
    except RecursionError:
        raise ValueError(f"pattern at {where} is nested too deeply") from None
    except OverflowError as e:
        raise ValueError(f"invalid pattern {_short(pattern)} at {where}: {e}") from None
    items = list(parsed)
    head = bool(items) and items[0] == (sre_constants.AT, sre_constants.AT_BEGINNING)
    size = pattern_size(parsed) * (1 if head else 2)  # a search also tracks every start
    if size > MAX_PATTERN_SIZE:
        raise ValueError(
            f"pattern {_short(pattern)} at {where} is too large to compile: its automaton has "
            f"about {size} positions (limit MAX_PATTERN_SIZE = {MAX_PATTERN_SIZE}; a repeat "
            "counts once per copy, a class with non-ASCII characters 10 times, twice "
            "without a leading ^)"
        )
    tail = bool(items) and items[-1] == (sre_constants.AT, sre_constants.AT_END)
    body = pattern[1 if head else 0:]
    if tail:
        if not body.endswith("$"):
            raise ValueError(f"pattern {pattern!r} at {where}: unsupported end anchor")
        body = body[:-1]
    return body, head, tail


MAX_PATTERN_SIZE = 400
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)
_POSSESSIVE = getattr(sre_constants, "POSSESSIVE_REPEAT", None)
_ATOMIC = getattr(sre_constants, "ATOMIC_GROUP", None)
_ASCII_CATEGORIES = (sre_constants.CATEGORY_DIGIT, sre_constants.CATEGORY_WORD,
                     sre_constants.CATEGORY_SPACE)


def pattern_size(parsed) -> int:
    """The positions of `parsed`'s automaton once counted repeats are unrolled:
    Σ over atoms of `weight · copies`, where an atom matching only ASCII weighs 1,
    one that matches non-ASCII characters 10 (their UTF-8 bytes take more states),
    and `copies` multiplies the upper count (the lower one when unbounded) of every
    enclosing repeat. The walk is iterative and its total is capped, so it costs
    O(len(pattern))."""
    total = 0
    stack = [(list(parsed), 1)]
    while stack and total <= MAX_PATTERN_SIZE:
        items, copies = stack.pop()
        for op, arg in items:
            if op in _REPEATS or (_POSSESSIVE is not None and op == _POSSESSIVE):
                lo, hi, sub = arg
                n = lo if hi == sre_constants.MAXREPEAT else hi
                stack.append((list(sub), copies * max(1, min(n, MAX_PATTERN_SIZE + 1))))
            elif op == sre_constants.SUBPATTERN:
                stack.append((list(arg[-1]), copies))
            elif op == sre_constants.BRANCH:
                stack.extend((list(b), copies) for b in arg[1])
            elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
                stack.append((list(arg[1]), copies))
            elif op == _ATOMIC:
                stack.append((list(arg), copies))
            elif op != sre_constants.AT:
                total += copies * _weight(op, arg)
    return total


def _weight(op, arg) -> int:
    if op == sre_constants.LITERAL:
        return 1 if arg < 0x80 else 10
    if op == sre_constants.IN:
        ascii_only = all(
            (o == sre_constants.LITERAL and a < 0x80)
            or (o == sre_constants.RANGE and a[1] < 0x80)
            or (o == sre_constants.CATEGORY and a in _ASCII_CATEGORIES)
            for o, a in arg
        )
        return 1 if ascii_only else 10
    return 10  # ANY, NOT_LITERAL, a category, a backreference: non-ASCII characters


def _short(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 40 else repr(pattern[:37] + "...")


@dataclass(frozen=True)
class KeySpec:
    """An object key: one of `values`, or (when `values` is None) any key but the
    declared names in `seen`; the text is tracked while it can become one of `names`."""

    values: frozenset | None
    seen: frozenset
    names: frozenset = frozenset()


class SFrame(NamedTuple):
    """A string being read: `spec` (a `Str` or `KeySpec`), code points read
    (capped), pattern state, decoded text (when values are constrained; None for
    a key that is no declared name),
    the escape being read and the bytes of an incomplete UTF-8 character."""

    spec: object
    count: int = 0
    q: int | None = None
    text: str | None = ""
    esc: str = ""
    u8: bytes = b""


def escape_state(esc: str) -> tuple[str | None, tuple]:
    """`(char, ())` for a complete escape, else `(None, ranges)` of the code points it
    can still become (empty: invalid)."""
    if esc == "\\":
        return None, ((0, MAX_CP),)
    c = esc[1]
    if c != "u":
        return (SIMPLE_ESCAPES[c], ()) if len(esc) == 2 and c in SIMPLE_ESCAPES else (None, ())
    hexes = esc[2:6]
    if not all(h in HEX for h in hexes):
        return None, ()
    if len(hexes) < 4:
        return None, _hex_ranges(hexes)
    v = int(hexes, 16)
    if 0xDC00 <= v <= 0xDFFF:
        return None, ()
    if not 0xD800 <= v <= 0xDBFF:
        return (chr(v), ()) if len(esc) == 6 else (None, ())
    base = 0x10000 + ((v - 0xD800) << 10)
    tail = esc[6:]
    if tail in ("", "\\", "\\u"):
        return None, ((base, base + 0x3FF),)
    low = tail[2:]
    if not tail.startswith("\\u") or len(low) > 4 or not all(h in HEX for h in low):
        return None, ()
    lo16, hi16 = _hex_span(low)
    lo16, hi16 = max(lo16, 0xDC00), min(hi16, 0xDFFF)
    if lo16 > hi16:
        return None, ()
    if len(low) == 4:
        return chr(base + lo16 - 0xDC00), ()
    return None, ((base + lo16 - 0xDC00, base + hi16 - 0xDC00),)


def _hex_span(h: str) -> tuple[int, int]:
    width = 16 ** (4 - len(h))
    lo = int(h, 16) * width if h else 0
    return lo, lo + width - 1


def _hex_ranges(h: str) -> tuple:
    lo, hi = _hex_span(h)
    out = []
    if lo <= min(hi, 0xD7FF):
        out.append((lo, min(hi, 0xD7FF)))
    a, b = max(lo, 0xD800), min(hi, 0xDBFF)
    if a <= b:
        out.append((0x10000 + ((a - 0xD800) << 10), 0x10000 + ((b - 0xD800) << 10) + 0x3FF))
    if max(lo, 0xE000) <= hi:
        out.append((max(lo, 0xE000), hi))
    return tuple(out)


def utf8_ranges(u8: bytes) -> tuple:
    """The code points an incomplete UTF-8 sequence `u8` can still become."""
    n = len(u8)
    total = utf8_length(u8[0])
    value = u8[0] & (0x7F >> total)
    for b in u8[1:]:
        value = (value << 6) | (b & 0x3F)
    rem = 6 * (total - n)
    lo, hi = value << rem, (value << rem) | ((1 << rem) - 1)
    lo = max(lo, (0, 0, 0x80, 0x800, 0x10000)[total])  # no overlong sequence: E0 starts U+0800
    return tuple((max(lo, a), min(hi, b)) for a, b in _UTF8_RANGES if max(lo, a) <= min(hi, b))


def _in_ranges(cp: int, ranges: tuple) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


__all__ = ["Pattern", "KeySpec", "SFrame", "escape_state", "utf8_ranges", "_in_ranges"]
