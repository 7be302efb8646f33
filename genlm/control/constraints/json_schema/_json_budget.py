"""Fewest bytes from a JSON recognizer state to a complete document (a lower bound),
for the token bound of `CoercedJson` (`fast_paths.TokensToFinish`).

A state is a set of configurations, each a stack of frames; the bound is the least
over the configurations of the bytes each open frame must still read, counted from
the schema alone:

- an open string: its closing quote, and one byte per code point below `minLength`;
- a literal (`true`, `null`, ...): its unread bytes; a number: none (it may be done);
- an array: `]`, and one byte per item still owed to `minItems` (one after a comma);
- an object: `}`; a read key its `:` and its value; a key being typed its `:`
  and a byte of its value; a required key not yet written `"key":` and its value
  (excepted the one being typed, where the typed text so far, a half-read UTF-8
  character's bytes included, begins its name);
- the document: its value, before one is opened.

A value not yet opened counts the fewest bytes of its schema node (`value_bytes`:
the quotes and `minLength` of a string, a literal's spelling, an object's braces and
required keys, an array's brackets and `minItems` items, one byte for a number).

Every count is bytes that any completion must read, so the sum never exceeds the
fewest bytes to a complete document; a schema's whole-document check
(`JsonSchema.document_check`) only removes documents.

Tokens from bytes. Each counted byte is a distinct byte of the completion drawn from
a small set (`mandated_bytes`): structure `{}[]":,`, a digit (every number has one),
the bytes of the literals, of the declared key names and of the enumerated strings,
and, for a character written as an escape, its escape's bytes (backslash, `u`, hex
digits: at least as many as the character's UTF-8 bytes). String contents are
counted only below a `minLength`; a schema with one counts every byte. So a
completion of `n` tokens holds at most `n · weight` counted bytes, `weight` the
most bytes of that set in one token (`mandated_weight`), and at least
`⌈L / weight⌉` tokens follow a state with bound `L`. On a GPT-2-like vocabulary
the longest tokens are runs of `-`, `=` or spaces, which hold none of those bytes:
the divisor is a word's length, not a table border's. `CoercedJson` reads it at
the state after each next token `y`, or (cheaper, where it cannot bind) from the
context's own state: `L(ctx·y) ≥ L(ctx) − w(y)`, `w(y)` the counted bytes `y` holds.
"""

from __future__ import annotations

import json
import weakref

import numpy as np

from genlm.control.constraints.json_schema._json_machine import (
    COLONED,
    KEY,
    NEXT,
    OPEN,
    VALUE,
    WS,
    AFrame,
    Doc,
    LFrame,
    OFrame,
)
from genlm.control.constraints.json_schema._json_nodes import Arr, Lit, Obj, Str
from genlm.control.constraints.json_schema._json_string import (
    HEX,
    SIMPLE_ESCAPES,
    KeySpec,
    SFrame,
    escape_state,
)
from genlm.control.constraints.regex.compile import utf8_length

INF = float("inf")


def value_bytes(node, _open: frozenset = frozenset()) -> int:
    """The fewest bytes of a value of `node` (a lower bound; 1 for a node met again
    inside itself, and for a node with no alternatives, which has no value)."""
    if id(node) in _open or not node.alts:
        return 1
    inner = _open | {id(node)}
    return min(_alt_bytes(alt, inner) for alt in node.alts)


def _alt_bytes(alt, inner: frozenset) -> int:
    if isinstance(alt, Str):
        return 2 + (min(len(v.encode()) for v in alt.values) if alt.values else alt.min_len)
    if isinstance(alt, Lit):
        return len(alt.text)
    if isinstance(alt, Obj):
        keys = [_key_cost(k, alt.props.get(k), inner) for k in alt.required]
        return 2 + sum(keys) + max(0, len(keys) - 1)
    if isinstance(alt, Arr):
        items = [alt.fixed[i] if i < len(alt.fixed) else alt.items for i in range(alt.min_items)]
        return (
            2
            + sum(value_bytes(n, inner) if n is not None else 1 for n in items)
            + max(0, alt.min_items - 1)
        )
    return 1  # a number


def _key_cost(key: str, node=None, inner: frozenset = frozenset()) -> int:
    """`"key":` and its value (one byte where the value's node is not known)."""
    value = 1 if node is None else value_bytes(node, inner)
    return len(key.encode()) + 3 + value


def _object_owes(frame: OFrame, typing: SFrame | None) -> int:
    """`frame`'s bytes; `typing` the key being typed in it, if any."""
    owed, alt = 1, frame.alt
    value = 1
    if frame.key is not None and frame.key in alt.props:
        value = value_bytes(alt.props[frame.key])
    if frame.phase == KEY and typing is None:
        owed += 1 + value  # the colon and the value
    elif frame.phase == COLONED:
        owed += value
    keys = {k: _key_cost(k, alt.props.get(k)) for k in alt.required - frame.seen}
    if typing is not None:
        owed += 2  # the typed key's colon and a byte of its value at least
        # the typed key may be a required key only where its text so far begins one
        could = [keys[k] for k in keys if _may_become(k, typing)]
        if could:
            owed -= max(could)
    owed += sum(keys.values())
    if frame.phase == NEXT and not keys and typing is None:
        owed += 4  # after a comma, some key: `"":` and a value byte at least
    return owed


def _may_become(key: str, typing: SFrame, canonical: bool = False) -> bool:
    """Whether the key being typed (`typing`: its decoded text, and a half-read escape
    or UTF-8 character) may still become `key`. The half-read character is part of
    the text: after `"` and the bytes `e7 8b`, the key is no ASCII name; after a
    quote and a backslash it is one whose next character the escape may spell (in
    the canonical spelling only the quote, the backslash and the control characters
    are escaped)."""
    text = typing.text
    if text is None or not key.startswith(text):
        return False
    rest = key[len(text) :]
    if typing.u8:
        return rest.encode("utf-8").startswith(typing.u8)
    if not typing.esc:
        return True
    if not rest:
        return False
    if canonical and not (rest[0] in '"\\' or ord(rest[0]) < 0x20):
        return False
    char, ranges = escape_state(typing.esc)
    if char is not None:
        return rest[0] == char
    return any(lo <= ord(rest[0]) <= hi for lo, hi in ranges)


_HEX = "".join(sorted(HEX)).encode()
_ESCAPE_LETTERS = "".join(SIMPLE_ESCAPES).encode() + b"u"  # what a backslash reads next


def _rest_of_escape(esc: str) -> tuple:
    """The bytes a half-read escape still reads, each right after the one before (in
    every spelling): after the backslash its letter, after `\\u` its hex digits."""
    if esc == "\\":
        return (_ESCAPE_LETTERS,)
    if esc.startswith("\\u") and len(esc) < 6:
        return (_HEX,) + (Glued(_HEX),) * (5 - len(esc))
    return ()


def _unread_utf8(u8: bytes) -> int:
    """The continuation bytes still owed to a UTF-8 character begun with `u8`."""
    return utf8_length(u8[0]) - len(u8) if u8 else 0


def _frame_owes(frame, above) -> int:
    if isinstance(frame, SFrame):  # (a half-read character's bytes are not counted: any
        # token may hold them, so `mandated_weight` does not count them; the patterns do)
        short = frame.spec.min_len - frame.count if isinstance(frame.spec, Str) else 0
        return 1 + max(0, short)
    if isinstance(frame, LFrame):
        return len(frame.text) - frame.pos
    if isinstance(frame, AFrame):
        open_item = 1 if frame.phase == VALUE else 0
        owed = max(0, frame.alt.min_items - frame.count - open_item)
        return 1 + max(owed, 1 if frame.phase == NEXT else 0)  # after a comma, an item
    if isinstance(frame, OFrame):
        typing = above if frame.phase == KEY and isinstance(above, SFrame) else None
        return _object_owes(frame, typing)
    if isinstance(frame, Doc):
        return value_bytes(frame.node) if frame.phase == OPEN else 0
    return 0  # a number, which may already be complete


def stack_owes(stack: tuple) -> int:
    """Bytes that every completion of one configuration reads."""
    return sum(
        _frame_owes(f, stack[i + 1] if i + 1 < len(stack) else None) for i, f in enumerate(stack)
    )


def fewest_bytes(state) -> float:
    """A lower bound on the bytes from `state` to a complete document (inf: dead)."""
    if not state:
        return INF
    return float(min(stack_owes(s) for s in state))


STRUCTURE = frozenset(b'{}[]":,\\u0123456789abcdefABCDEF')


def _nodes(root) -> list:
    """Every schema node reachable from `root` (each once)."""
    seen, order = {id(root)}, [root]
    for node in order:
        for alt in node.alts:
            kids = []
            if isinstance(alt, Obj):
                kids = list(alt.props.values()) + [alt.additional]
            elif isinstance(alt, Arr):
                kids = list(alt.fixed) + [alt.items]
            for kid in kids:
                if kid is not None and id(kid) not in seen:
                    seen.add(id(kid))
                    order.append(kid)
    return order


def mandated_bytes(root) -> frozenset | None:
    """The bytes `fewest_bytes` may count in a document of the schema `root`; None
    (every byte) where some string has a `minLength`."""
    out = set(STRUCTURE)
    for node in _nodes(root):
        for alt in node.alts:
            if isinstance(alt, Str):
                if alt.min_len > 0:
                    return None
                for v in alt.values or ():
                    out.update(v.encode("utf-8"))
            elif isinstance(alt, Lit):
                out.update(alt.text)
            elif isinstance(alt, Obj):
                for k in list(alt.props) + list(alt.required):
                    out.update(k.encode("utf-8"))
    return frozenset(out)


def mandated_weight(token: bytes, counted: frozenset | None) -> int:
    """How many of `token`'s bytes are in `counted` (all of them for None)."""
    if counted is None:
        return len(token)
    return sum(b in counted for b in token)


# Tokens from the order of the bytes ----------------------------------------------
#
# The counted bytes above come in an order. The bytes that close a configuration's
# open frames are read innermost frame first, and each frame's own bytes in the
# order JSON writes them (a key's closing quote, its colon, its value, a comma, the
# next key, the closing brace). So every completion holds the configuration's
# `pattern`, a sequence of byte classes, as a subsequence. The tokens that spell a
# completion split it into consecutive pieces; each piece holds a consecutive part
# of the pattern as a subsequence of its own bytes. So at least `OrderedCover.fewest`
# tokens follow: the fewest parts the pattern splits into, each held by some token.
# A pattern leaves out what it cannot order: the bytes of a value of several
# kinds, string contents, a number's digits but one, the names of more than three
# keys still owed, and key names outside the canonical spelling (where `\u006e`
# may spell `n`).

_DIGITS = b"0123456789"
_CONTINUATION = bytes(range(0x80, 0xC0))  # a UTF-8 continuation byte
_MAX_PERMUTED = 3  # keys still owed, past which their order is not enumerated
_MAX_PATTERN = 63  # elements kept (a prefix of a pattern is one too; 63: `OrderedCover`'s bit sets)
_MAX_CASES = 64  # patterns per configuration, past which a frame's cases share a prefix
_MAX_KEPT = 1 << 16  # patterns kept per kind of key (`stack_patterns`, `_object_patterns`)


class Gapped(bytes):
    """A pattern element (a byte class) after which the completion may hold, between
    the element before it and this one, only bytes of `gap` (a plain `bytes` element:
    any bytes). Equal only to an element of the same class and bytes."""

    __slots__ = ()
    gap: bytes = b""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and bytes.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self), bytes(self)))


class Glued(Gapped):
    """Right after the element before it (the canonical spelling writes no whitespace
    and no escape in `"name":`, `,"` or `{"`)."""

    __slots__ = ()
    gap = b""


class AfterNumber(Gapped):
    """After a number's first digit: only the number's other bytes come between."""

    __slots__ = ()
    gap = b"0123456789.eE+-"


class AfterColon(Gapped):
    """A number's first digit after its key's colon: only a minus sign comes between."""

    __slots__ = ()
    gap = b"-"


def gap_of(element: bytes) -> bytes | None:
    """The bytes that may come right before `element` after the element before it
    (None: any)."""
    return element.gap if isinstance(element, Gapped) else None


_SPACE = bytes(sorted(WS))  # JSON's whitespace
_ESCAPE_TAIL = _ESCAPE_LETTERS + _HEX  # what follows an escape's backslash


class AfterSpace(Gapped):
    """After the element before it, whitespace at most (the default spelling)."""

    __slots__ = ()
    gap = _SPACE


class AfterEscape(Gapped):
    """A key's next character (or closing quote) after the one before it, which an
    escape or a UTF-8 character of several bytes may have spelled: only the rest of
    that escape or character comes between."""

    __slots__ = ()
    gap = _ESCAPE_TAIL + _CONTINUATION


class AfterNumberSpace(Gapped):
    """After a number's first digit: its other bytes, then whitespace."""

    __slots__ = ()
    gap = AfterNumber.gap + _SPACE


class AfterColonSpace(Gapped):
    """A number's first digit after its key's colon: whitespace and a minus sign."""

    __slots__ = ()
    gap = AfterColon.gap + _SPACE


class _Way:
    """How a spelling joins a pattern's elements: `structure` between structural bytes
    (`,"`, `":`, a colon and its value), `in_key` between a key's characters,
    `after_number` after a number's first digit, `before_digit` between a colon and a
    number's first digit. True only for the canonical spelling, which fixes a key
    name's bytes."""

    __slots__ = ("name", "structure", "in_key", "after_number", "before_digit")

    def __init__(self, name: str, structure, in_key, after_number, before_digit):
        self.name, self.structure, self.in_key = name, structure, in_key
        self.after_number, self.before_digit = after_number, before_digit

    def __bool__(self) -> bool:
        return self.name == "canonical"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Way) and other.name == self.name

    def __hash__(self) -> int:
        return hash((_Way, self.name))


_WAYS = {
    "canonical": _Way("canonical", Glued, Glued, AfterNumber, AfterColon),
    "compact": _Way("compact", Glued, AfterEscape, AfterNumber, AfterColon),
    "any": _Way("any", AfterSpace, AfterEscape, AfterNumberSpace, AfterColonSpace),
}


def _way(spelling) -> _Way:
    """The `_Way` of a spelling name, a `_Way`, or a bool (True: canonical)."""
    if isinstance(spelling, _Way):
        return spelling
    if isinstance(spelling, bool):
        return _WAYS["canonical" if spelling else "any"]
    return _WAYS[spelling]


def _joined(pattern: tuple, kind, first: bool = False) -> tuple:
    """`pattern` with each element after the first (and the first too where `first`)
    an element of class `kind` (a `Gapped`; None: unchanged)."""
    if kind is None:
        return pattern
    return tuple(kind(e) if (k or first) else e for k, e in enumerate(pattern))


def _after_colon(value: tuple, canonical) -> tuple:
    """A value's pattern right after its key's colon: its first byte joined to the
    colon as the spelling's structure (a number's digit: a minus sign may come too)."""
    way = _way(canonical)
    if not value:
        return value
    if value[0] == _DIGITS:
        return (way.before_digit(_DIGITS),) + value[1:]
    return _joined(value[:1], way.structure, True) + value[1:]


def _spelled_key(key: str, canonical: bool) -> tuple:
    """`"key":` as byte classes: the name's bytes where the spelling fixes them, else
    one class per character (`_char_classes`)."""
    way = _way(canonical)
    if not way:  # the first character right after the quote, the others after escapes
        chars = _joined(_char_classes(key), way.in_key)
        chars = _joined(chars[:1], Glued, True) + chars[1:]
        close = _joined((b'"',), way.in_key if key else Glued, True)
        return (b'"',) + chars + close + _joined((b":",), way.structure, True)
    body = json.dumps(key, ensure_ascii=False).encode("utf-8")
    return _joined(tuple(bytes([b]) for b in body) + (b":",), Glued)


def _char_classes(text: str) -> tuple:
    """Per character of a string spelled with any escapes, the bytes its spelling may
    begin with: its first UTF-8 byte (written raw) or a backslash (an escape)."""
    return tuple(bytes(sorted({ch.encode("utf-8")[0], 0x5C})) for ch in text)


_VALUE_PATTERNS: "weakref.WeakKeyDictionary" = (
    weakref.WeakKeyDictionary()
)  # node -> {canonical: pattern}


def value_pattern(node, canonical: bool, _open: frozenset = frozenset()) -> tuple:
    """Byte classes that every value of `node` holds in order (the longest common
    prefix of its alternatives' patterns). Kept per node where no node is open."""
    if node is None or id(node) in _open or not node.alts:
        return ()
    kept = _VALUE_PATTERNS.setdefault(node, {}) if not _open else {}
    got = kept.get(canonical)
    if got is None:
        inner = _open | {id(node)}
        got = kept[canonical] = _common_prefix(
            [_alt_pattern(alt, canonical, inner) for alt in node.alts]
        )
    return got


def value_patterns(node, canonical: bool) -> list[tuple]:
    """Byte classes that every value of `node` holds in order, one pattern per case:
    per alternative, and for an object with 2 to `_MAX_PERMUTED` required keys per
    order of its keys, named (`value_pattern` has one pattern for all, so their
    shapes without names); past `_MAX_CASES` cases, their common prefix."""
    if node is None or not node.alts:
        return [()]
    out: list[tuple] = []
    for alt in node.alts:
        if isinstance(alt, Obj) and 1 < len(alt.required) <= _MAX_PERMUTED:
            keys = _owed_keys(alt, sorted(alt.required), False, canonical)
            out.extend((b"{",) + k + (b"}",) for k in keys)  # (other keys may come first)
        else:
            out.append(_alt_pattern(alt, canonical, frozenset({id(node)})))
    return out if len(out) <= _MAX_CASES else [_common_prefix(out)]


def _alt_pattern(alt, canonical: bool, inner: frozenset) -> tuple:
    if isinstance(alt, Str):
        return (b'"', b'"')
    if isinstance(alt, Lit):
        return _joined(tuple(bytes([b]) for b in alt.text), Glued)
    if isinstance(alt, Obj):  # keys in any order: named only where there is one
        if len(alt.required) > 1:
            shape = (b'"', b'"', b":")
            return (b"{",) + shape + ((b",",) + shape) * (len(alt.required) - 1) + (b"}",)
        keys = _keys_pattern(alt, sorted(alt.required), False, canonical, inner)
        return (b"{",) + keys + (b"}",)
    if isinstance(alt, Arr):
        return (b"[", b"]")
    return (_DIGITS,)  # a number holds a digit


def _keys_pattern(alt, keys: list, comma_first: bool, canonical: bool, inner=frozenset()) -> tuple:
    """The owed keys `keys` in this order, each `"key":` and its value, commas between
    (and before the first where `comma_first`)."""
    out: tuple = ()
    for i, k in enumerate(keys):
        if i or comma_first:
            out += (b",",)
        node = alt.props.get(k, alt.additional)
        spelled = _spelled_key(k, canonical)
        quote = _joined(spelled[:1], _way(canonical).structure, bool(i or comma_first))
        value = value_pattern(node, canonical, inner)
        out += quote + spelled[1:] + _after_colon(value, canonical)
    return out


_OWED_KEYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # alt -> {case: patterns}


def _owed_keys(alt, owed: list, comma_first: bool, canonical: bool) -> list[tuple]:
    """The patterns of the owed keys, one per order they may come in (the keys'
    shapes without names or values where there are too many to order). Kept per
    object and set of owed keys: the frames of many states owe the same keys."""
    kept = _OWED_KEYS.setdefault(alt, {})
    case = (tuple(sorted(owed)), comma_first, _way(canonical))
    got = kept.get(case)
    if got is None:
        if len(kept) >= _MAX_KEPT:
            kept.clear()
        got = kept[case] = _make_owed_keys(alt, owed, comma_first, canonical)
    return got


def _make_owed_keys(alt, owed: list, comma_first: bool, canonical: bool) -> list[tuple]:
    if len(owed) > _MAX_PERMUTED:
        shape = (b'"', b'"', b":")
        out = (b",",) if comma_first else ()
        return [out + shape + ((b",",) + shape) * (len(owed) - 1)]
    from itertools import permutations

    return [_keys_pattern(alt, list(p), comma_first, canonical) for p in permutations(sorted(owed))]


_OBJECT_PATTERNS: dict = {}  # (frame, what the typed key tells, spelling) -> patterns


def _object_patterns(frame: OFrame, typing: SFrame | None, canonical: bool) -> list[tuple]:
    """`frame`'s bytes in order, one pattern per case (as `_object_owes` counts them).
    Kept per frame and what they read of the typed key (its text, and the escape or
    UTF-8 character half read)."""
    key = (frame, canonical, None if typing is None else (typing.text, typing.esc, typing.u8))
    got = _OBJECT_PATTERNS.get(key)
    if got is None:
        if len(_OBJECT_PATTERNS) >= _MAX_KEPT:
            _OBJECT_PATTERNS.clear()
        got = _OBJECT_PATTERNS[key] = _make_object_patterns(frame, typing, canonical)
    return got


def _make_object_patterns(frame: OFrame, typing: SFrame | None, canonical: bool) -> list[tuple]:
    alt, phase = frame.alt, frame.phase
    heads: list[tuple] = [()]
    if typing is not None:
        heads = [_joined((b'"', b":"), _way(canonical).structure)]  # the key's closing quote, colon
    elif phase in (KEY, COLONED):  # the colon (where not read yet) and the value
        node = alt.additional if frame.key is None else alt.props.get(frame.key, alt.additional)
        colon = (b":",) if phase == KEY else ()
        heads = [
            colon + (_after_colon(v, canonical) if colon else v)
            for v in value_patterns(node, canonical)
        ]
    owed = sorted(alt.required - frame.seen)
    cases = [(head, owed) for head in heads]
    head = heads[0]
    if typing is not None:
        could = [k for k in owed if _may_become(k, typing, canonical)]
        if could:  # the typed key is one of them (the rest of its name, its value) ...
            named = [
                (_named_key(c, alt, typing, head, canonical), [k for k in owed if k != c])
                for c in could
            ]
            # ... or, where the schema allows one it may become, a key not owed
            other = (alt.additional is not None and bool(alt.additional.alts)) or any(
                _may_become(k, typing, canonical)
                for k in alt.props
                if k not in owed and k not in frame.seen
            )
            cases = named + (cases if other else [])
    comma_first = phase not in (OPEN, NEXT)
    out = []
    for head, keys in cases:
        if keys:
            tails = _owed_keys(alt, keys, comma_first, canonical)
        elif phase == NEXT and typing is None:
            tails = [(b'"', b'"', b":")]  # after a comma, some key
        else:
            tails = [()]
        out.extend(head + t + (b"}",) for t in tails)
    return out if len(out) <= _MAX_CASES else [_common_prefix(out)]  # (a prefix of each)


def _named_key(key: str, alt, typing: SFrame, head: tuple, canonical: bool) -> tuple:
    """The typed key as `key`: the rest of its name, `head` (its closing quote and
    colon: the quote right after the name's last byte where any are left) and its
    value, right after the colon."""
    way = _way(canonical)
    rest = _joined(_rest_of_key(key, typing, canonical), way.in_key)
    value = value_pattern(alt.props.get(key, alt.additional), canonical)
    head = (_joined(head[:1], way.in_key, True) if rest else head[:1]) + head[1:]
    return rest + head + _after_colon(value, canonical)


def _rest_of_key(key: str, typing: SFrame, canonical: bool) -> tuple:
    """The bytes of `key` not yet typed, where the canonical spelling fixes them and
    no escape is half read; in the other spellings one class per character still to
    come (`_char_classes`). A half-read UTF-8 character's bytes, read and unread, are
    not among them (its key frame's pattern holds the unread ones), nor is the
    character a half-read escape spells."""
    if not canonical:
        return _char_classes(key[len(typing.text) + (1 if typing.u8 or typing.esc else 0) :])
    if typing.esc:
        return ()
    done = len(json.dumps(typing.text, ensure_ascii=False).encode("utf-8")) - 1
    done += len(typing.u8) + _unread_utf8(typing.u8)
    body = json.dumps(key, ensure_ascii=False).encode("utf-8")[done:-1]
    return tuple(bytes([b]) for b in body)


def _frame_patterns(frame, above, canonical: bool) -> list[tuple]:
    if isinstance(frame, SFrame):  # a key's closing quote is its object's (`_object_patterns`)
        half = (_CONTINUATION,) * _unread_utf8(frame.u8) + _rest_of_escape(frame.esc)
        return [half] if isinstance(frame.spec, KeySpec) else [half + (b'"',)]
    if isinstance(frame, LFrame):
        return [_joined(tuple(bytes([b]) for b in frame.text[frame.pos :]), Glued)]
    if isinstance(frame, AFrame):
        return [(b"]",)]
    if isinstance(frame, OFrame):
        typing = above if frame.phase == KEY and isinstance(above, SFrame) else None
        return _object_patterns(frame, typing, canonical)
    if isinstance(frame, Doc):
        return value_patterns(frame.node, canonical) if frame.phase == OPEN else [()]
    return [()]  # a number, which may already be complete


_STACK_PATTERNS: dict = {}  # stack -> its patterns (cleared past `_MAX_KEPT`)


def stack_patterns(stack: tuple) -> list[tuple]:
    """The patterns of one configuration (every completion holds one of them in
    order), innermost frame first. Kept per stack."""
    got = _STACK_PATTERNS.get(stack)
    if got is None:
        if len(_STACK_PATTERNS) >= _MAX_KEPT:
            _STACK_PATTERNS.clear()
        got = _STACK_PATTERNS[stack] = _stack_patterns(stack)
    return got


def _stack_patterns(stack: tuple) -> list[tuple]:
    canonical = _way(stack[0].spelling if isinstance(stack[0], Doc) else "any")
    out = [()]
    for i in range(len(stack) - 1, -1, -1):
        above = stack[i + 1] if i + 1 < len(stack) else None
        parts = _frame_patterns(stack[i], above, canonical)
        if len(out) * len(parts) > _MAX_CASES:
            parts = [_common_prefix(parts)]
        out = [p + q for p in out for q in parts]
    out = [_after_numbers(p, canonical.after_number) for p in out]
    return [p[:_MAX_PATTERN] for p in out]


def _after_numbers(pattern: tuple, kind) -> tuple:
    """`pattern` with each plain element that follows a number's digit marked
    `AfterNumber` (in the canonical spelling a number's own bytes are all that come
    between its first digit and the `,`, `}` or `]` after it)."""
    out = list(pattern)
    for k in range(1, len(out)):
        if type(out[k]) is bytes and bytes.__eq__(out[k - 1], _DIGITS):
            out[k] = kind(out[k])
    return tuple(out)


def _common_prefix(patterns: list[tuple]) -> tuple:
    """The longest common prefix of `patterns` (a subsequence of each)."""
    first = patterns[0]
    n = len(first)
    for p in patterns[1:]:
        n = min(n, len(p))
        n = next((k for k in range(n) if p[k] != first[k]), n)
    return first[:n]


class OrderedCover:
    """`fewest(pattern)`: the fewest tokens whose bytes hold `pattern` (byte classes)
    as consecutive parts, each part a subsequence of one token's bytes, where only
    bytes of an element's gap (`Gapped`: none for `Glued`) come between it and the
    element before it: in the same token, between the two; past a part's end, before
    it in the next token.

    Args:
        tokens: the vocabulary's byte strings.
        max_kept: the most patterns whose answer is kept.
    """

    #: Tokens longer than this are not scanned: each is taken to hold as many
    #: elements of a pattern as it has bytes, where it holds the first (a bound that
    #: only lowers the count).
    max_scanned = 64

    def __init__(self, tokens: list[bytes], max_kept: int = 4096):
        self.max_kept = max_kept
        lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
        short = lengths <= self.max_scanned
        width = int(lengths[short].max(initial=0))
        # the short tokens' bytes, one row each, padded with 0: no pattern reads 0
        # (a key name's control characters are escapes in every spelling)
        self._bytes = np.zeros((len(tokens), width), dtype=np.uint8)
        keep = np.flatnonzero(short & (lengths > 0))
        if len(keep):
            flat = np.frombuffer(b"".join(tokens[i] for i in keep.tolist()), dtype=np.uint8)
            rows = np.repeat(keep, lengths[keep])
            starts = np.repeat(np.cumsum(lengths[keep]) - lengths[keep], lengths[keep])
            self._bytes[rows, np.arange(len(flat)) - starts] = flat
        self._lengths = lengths
        self._short = short
        holders: list[list[int]] = [[] for _ in range(256)]
        for i, t in enumerate(tokens):
            for b in set(t):
                holders[b].append(i)
        self._holders = [np.asarray(h, dtype=np.int64) for h in holders]
        self._of_class: dict = {}
        self._pairs: dict = {}
        self._kept: dict = {}
        self._element_ids: dict = {}  # element -> a small int (suffix keys hash fast)
        self._tails: dict = {}  # a pattern's suffix (element ids, from its 2nd on) -> fewest

    def _holding(self, cls: bytes) -> np.ndarray:
        """The tokens that hold a byte of `cls` (sorted)."""
        cls = bytes(cls)  # (an element's gap does not change which tokens hold it)
        got = self._of_class.get(cls)
        if got is None:
            got = self._of_class[cls] = np.unique(np.concatenate([self._holders[b] for b in cls]))
        return got

    def _pair(self, first: bytes, second: bytes) -> tuple[np.ndarray, int]:
        """The short tokens that hold a byte of each class (only they can hold two
        elements of a pattern from one that starts with `first`), and the longest
        long token that holds a byte of `first` (0: none)."""
        key = (bytes(first), bytes(second))
        got = self._pairs.get(key)
        if got is None:
            a = self._holding(first)
            both = np.intersect1d(a, self._holding(second), assume_unique=True)
            longest = self._lengths[a[~self._short[a]]]
            got = self._pairs[key] = (both[self._short[both]], int(longest.max(initial=0)))
        return got

    def _reach(self, masks: np.ndarray, skip: np.ndarray, pattern: tuple, i: int) -> int:
        """The furthest `j` with `pattern[i:j]` held by one token's bytes in order, with
        only bytes of its gap (`gap_of`) before each element after the one before it,
        or before the first where the one before ends the token before; or at least
        that far (a long token counts its length). Each token is read by the
        pattern's automaton as a set of states (bit `j`: `j` elements matched),
        `masks[b]` the elements byte `b` matches, `skip[b]` the states that may read
        `b` without matching."""
        n = len(pattern)
        if not len(self._holding(pattern[i])):
            return i
        if i + 1 == n:
            return n
        rows, longest = self._pair(pattern[i], pattern[i + 1])
        far = min(i + longest, n) if longest else i + 1
        if len(rows):
            block = self._bytes[rows, : int(self._lengths[rows].max())]
            # the bytes before the part's first element in its token come after the
            # element before it (ending the token before): its gap holds them
            state = np.full(len(rows), 1 << i, dtype=np.uint64)
            seen = state.copy()
            one = np.uint64(1)
            for col in block.T:
                state = ((state & masks[col]) << one) | (state & skip[col])
                seen |= state
            far = max(far, int(np.bitwise_or.reduce(seen)).bit_length() - 1)
        return far

    def fewest(self, pattern: tuple) -> int:
        """The fewest parts (0 for an empty pattern; at most 63 elements). An element
        that no token holds counts one part (the pattern is then unreachable; a lower
        bound stays one).

        The fewest parts of a suffix that starts past the first element depend on the
        suffix alone (its first part is anchored by that element's gap, as `_reach`
        reads it), so they are kept per suffix: the patterns of a state and of its
        successors share their outer frames' elements, and only a new pattern's new
        leading elements are read against the vocabulary."""
        got = self._kept.get(pattern)
        if got is not None:
            return got
        n = len(pattern)
        ids = self._element_ids
        if len(ids) > 1 << 16 or len(self._tails) > 1 << 16:
            ids.clear()
            self._tails.clear()
        key = tuple([ids.setdefault(e, len(ids)) for e in pattern])
        tails = self._tails
        best = [0] * (n + 1)
        automaton = None
        for i in range(n - 1, -1, -1):
            if i:
                hit = tails.get(key[i:])
                if hit is not None:
                    best[i] = hit
                    continue
            if automaton is None:
                automaton = self._automaton(pattern)
            far = max(self._reach(*automaton, pattern, i), i + 1)
            best[i] = 1 + min(best[i + 1 : far + 1])
            if i:
                tails[key[i:]] = best[i]
        if len(self._kept) >= self.max_kept:
            self._kept.clear()
        self._kept[pattern] = best[0]
        return best[0]

    def _automaton(self, pattern: tuple) -> tuple[np.ndarray, np.ndarray]:
        """`(masks, skip)` of `pattern`'s automaton (see `_reach`)."""
        n = len(pattern)
        masks = np.zeros(256, dtype=np.uint64)
        for k, cls in enumerate(pattern):
            masks[list(cls)] |= np.uint64(1 << k)
        masks[0] = 0  # the padding byte
        # skip[b]: the states that may read byte b without matching: state 0 and the
        # end always, state k where b may come before element k (`gap_of`)
        skip = np.zeros(256, dtype=np.uint64)
        anywhere = 1 | (1 << n)
        for k, e in enumerate(pattern):
            gap = gap_of(e) if k else None
            if gap is None:
                anywhere |= 1 << k
            else:
                skip[list(gap)] |= np.uint64(1 << k)
        skip |= np.uint64(anywhere)
        skip[0] = ~np.uint64(0)  # the padding past a token's end: every state stays
        return masks, skip

    def fewest_tokens(self, state) -> float:
        """A lower bound on the tokens from `state` to a complete document: the least
        over its configurations and their patterns (inf: dead)."""
        if not state:
            return INF
        return float(min(self.fewest(p) for s in state for p in stack_patterns(s)))


__all__ = [
    "OrderedCover",
    "fewest_bytes",
    "mandated_bytes",
    "mandated_weight",
    "stack_owes",
    "stack_patterns",
    "value_pattern",
]
