"""A deterministic recognizer of JSON documents valid under a compiled schema.

A configuration is a stack of frames (a tuple, the open value last); a state is
the frozenset of live configurations (several when `anyOf` alternatives or
untyped values are still undecided). States are immutable and hashable, and
`step(state, byte)` is a pure function, so states can be cached and interned.
Every configuration kept is completable (see `_json_schema.prune`), so a state is
non-empty exactly when the bytes read are a prefix of a valid document.
"""

from __future__ import annotations

from typing import NamedTuple

from genlm.control.constraints.json_schema._json_number import (
    NUMBER_START,
    is_complete,
    number_shape,
    reachable,
    spelling_step,
    unbounded,
    value_ok,
)
from genlm.control.constraints.json_schema._json_schema import Arr, Lit, Node, Num, Obj, Str
from genlm.control.constraints.json_schema._json_spelling import canonical_escape
from genlm.control.constraints.json_schema._json_string import (
    KeySpec,
    SFrame,
    _in_ranges,
    escape_state,
    utf8_ranges,
)
from genlm.control.constraints.regex.compile import utf8_next_bytes

WS = frozenset(b" \t\n\r")
QUOTE, BACKSLASH, COLON, COMMA = 0x22, 0x5C, 0x3A, 0x2C
OPEN, VALUE, AFTER, NEXT, KEY, COLONED = range(6)


class Doc(NamedTuple):
    """The document, at the bottom of every stack; it carries the spelling
    (`_json_spelling`), which every byte outside strings and inside escapes reads."""

    node: Node
    phase: int = OPEN
    spelling: str = "any"


class OFrame(NamedTuple):
    alt: Obj
    phase: int = OPEN
    seen: frozenset = frozenset()
    key: str | None = None


class AFrame(NamedTuple):
    alt: Arr
    phase: int = OPEN
    count: int = 0


class NFrame(NamedTuple):
    alt: Num
    text: str


class LFrame(NamedTuple):
    text: bytes
    pos: int


def initial_state(node: Node, spelling: str = "any") -> frozenset:
    """The state before any byte, for documents of `node` in `spelling`."""
    return frozenset({(Doc(node, OPEN, spelling),)})


def _ws(stack: tuple, b: int) -> bool:
    """Whether `b` is whitespace the stack's spelling allows here."""
    return b in WS and stack[0].spelling == "any"


def step(state: frozenset, byte: int) -> frozenset | None:
    """The configurations after reading `byte` (None: no valid document continues)."""
    out = set()
    for stack in state:
        out.update(_step(stack, byte))
    return frozenset(out) if out else None


def accepts(state: frozenset) -> bool:
    """Whether the bytes read form a complete valid document."""
    return any(_finish(s) for s in state)


def _finish(stack: tuple) -> bool:
    top = stack[-1]
    if isinstance(top, Doc):
        return top.phase == AFTER
    if isinstance(top, NFrame) and is_complete(top.text) and value_ok(top.text, top.alt):
        return any(_finish(s) for s in _done(stack[:-1]))
    return False


def _done(below: tuple) -> list[tuple]:
    """`below` after its open child value is complete."""
    parent = below[-1]
    if isinstance(parent, AFrame):
        return [below[:-1] + (parent._replace(phase=AFTER, count=_counted(parent)),)]
    return [below[:-1] + (parent._replace(phase=AFTER),)]


def _counted(frame: AFrame) -> int:
    """The item count an array frame keeps after one more item. Without `maxItems` the
    count is read only against `minItems` and the fixed items (`count >= min_items`,
    `count < len(fixed)`, and the budget's `min_items - count`), so it stops at the
    larger of the two: arrays that differ only in how many items past it they hold
    are one state."""
    alt = frame.alt
    if alt.max_items is None:
        return min(frame.count + 1, max(alt.min_items, len(alt.fixed)))
    return frame.count + 1


def _kept(text: str, num) -> str:
    """What a number frame keeps of its prefix: the shape where the number is
    unbounded (numbers of one shape are one state), else the text itself."""
    return number_shape(text) if unbounded(num) else text


def _step(stack: tuple, b: int) -> list[tuple]:
    top, below = stack[-1], stack[:-1]
    kind = type(top)
    if kind is SFrame:
        return _string(top, below, b)
    if kind is NFrame:
        text = top.text + chr(b)
        if spelling_step(top.text, b, top.alt.integer) and reachable(text, top.alt):
            return [below + (NFrame(top.alt, _kept(text, top.alt)),)]
        if is_complete(top.text) and value_ok(top.text, top.alt):
            return [s2 for s in _done(below) for s2 in _step(s, b)]
        return []
    if kind is LFrame:
        if top.text[top.pos] != b:
            return []
        if top.pos + 1 == len(top.text):
            return _done(below)
        return [below + (LFrame(top.text, top.pos + 1),)]
    if kind is Doc:
        if _ws(stack, b):
            return [stack]
        if top.phase == OPEN:
            return _start(top.node, b, below + (top._replace(phase=VALUE),))
        return []
    if kind is OFrame:
        return _object(top, below, b)
    return _array(top, below, b)


def _start(node: Node, b: int, parent: tuple) -> list[tuple]:
    """Stacks with a value of `node` opened by byte `b` on top of `parent`."""
    out = []
    for alt in node.alts:
        kind = type(alt)
        if kind is Str:
            if b == QUOTE:
                out.append(parent + (SFrame(alt, 0, alt.pattern.start if alt.pattern else None),))
        elif kind is Num:
            if b in NUMBER_START and spelling_step("", b, alt.integer) and reachable(chr(b), alt):
                out.append(parent + (NFrame(alt, _kept(chr(b), alt)),))
        elif kind is Obj:
            if b == 0x7B:
                out.append(parent + (OFrame(alt),))
        elif kind is Arr:
            if b == 0x5B:
                out.append(parent + (AFrame(alt),))
        elif kind is Lit and alt.text[0] == b:
            out.append(parent + (LFrame(alt.text, 1),))
    return out


def _value_node(alt: Obj, key: str | None) -> Node | None:
    node = alt.additional if key is None else alt.props.get(key, alt.additional)
    return node if node is not None and node.alts else None


def _key_spec(alt: Obj, seen: frozenset) -> KeySpec | None:
    """The keys that can still be added (None: none can). A key named in `properties`
    or `required` may appear once per object."""
    if alt.additional is not None and alt.additional.alts:
        return KeySpec(None, seen, frozenset(alt.props) | alt.required)
    names = frozenset(k for k, n in alt.props.items() if n.alts and k not in seen)
    return KeySpec(names, seen) if names else None


def _object(top: OFrame, below: tuple, b: int) -> list[tuple]:
    if _ws(below, b):
        return [below + (top,)]
    phase, alt = top.phase, top.alt
    if phase in (OPEN, NEXT, AFTER) and b == 0x7D and phase != NEXT:
        return _done(below) if alt.required <= top.seen else []
    if phase in (OPEN, NEXT) and b == QUOTE:
        spec = _key_spec(alt, top.seen)
        return [] if spec is None else [below + (top._replace(phase=KEY), SFrame(spec))]
    if phase == AFTER and b == COMMA:
        return [] if _key_spec(alt, top.seen) is None else [below + (top._replace(phase=NEXT),)]
    if phase == KEY and b == COLON:
        return [below + (top._replace(phase=COLONED),)]
    if phase == COLONED:
        return _start(_value_node(alt, top.key), b, below + (top._replace(phase=VALUE),))
    return []


def _array(top: AFrame, below: tuple, b: int) -> list[tuple]:
    if _ws(below, b):
        return [below + (top,)]
    alt, phase = top.alt, top.phase
    if phase in (OPEN, AFTER) and b == 0x5D:
        return _done(below) if top.count >= alt.min_items else []
    if phase == AFTER and b == COMMA:
        return [below + (top._replace(phase=NEXT),)] if _item_node(alt, top.count) else []
    if phase in (OPEN, NEXT):
        node = _item_node(alt, top.count)
        if node is None:
            return []
        return _start(node, b, below + (top._replace(phase=VALUE),))
    return []


def _item_node(alt: Arr, count: int) -> Node | None:
    if alt.max_items is not None and count >= alt.max_items:
        return None
    node = alt.fixed[count] if count < len(alt.fixed) else alt.items
    return node if node is not None and node.alts else None


def _string(top: SFrame, below: tuple, b: int) -> list[tuple]:
    spec = top.spec
    if top.esc == "" and top.u8 == b"" and b == QUOTE:
        if isinstance(spec, KeySpec):
            return _close_key(top, below)
        return _done(below) if _string_accepts(top) else []
    canonical = below[0].spelling == "canonical"
    new = _string_byte(top, b, canonical)
    if new is None or not _string_live(new, canonical):
        return []
    return [below + (new,)]


def _close_key(top: SFrame, below: tuple) -> list[tuple]:
    parent = below[-1]
    key, spec = top.text, top.spec
    if key is None or (key not in parent.alt.props and key not in parent.alt.required):
        # a key neither declared nor required: any number of times
        if _value_node(parent.alt, None) is None:
            return []
        return [below[:-1] + (parent._replace(phase=KEY, key=None),)]
    if key in spec.seen or (spec.values is not None and key not in spec.values):
        return []
    if _value_node(parent.alt, key) is None:
        return []
    return [below[:-1] + (parent._replace(phase=KEY, seen=parent.seen | {key}, key=key),)]


def _string_accepts(top: SFrame) -> bool:
    spec = top.spec
    if spec.values is not None:
        return top.text in spec.values
    if spec.pattern is not None and top.q not in spec.pattern.finals:
        return False
    return spec.min_len <= top.count and (spec.max_len is None or top.count <= spec.max_len)


def _tracks_text(spec) -> bool:
    return isinstance(spec, KeySpec) or spec.values is not None


def _count_limit(spec) -> int:
    if isinstance(spec, KeySpec) or spec.values is not None:
        return 0
    return spec.max_len + 1 if spec.max_len is not None else spec.min_len


def _escape(esc: str, canonical: bool) -> tuple[str | None, tuple]:
    """`escape_state`, or `canonical_escape` in the canonical spelling."""
    return canonical_escape(esc) if canonical else escape_state(esc)


def _string_byte(top: SFrame, b: int, canonical: bool = False) -> SFrame | None:
    """The frame after one byte inside a string (None: not a valid string byte, or an
    escape outside the canonical ones where `canonical`)."""
    spec = top.spec
    pattern = None if isinstance(spec, KeySpec) else spec.pattern
    if top.esc:
        esc = top.esc + chr(b)
        char, ranges = _escape(esc, canonical)
        if char is None:
            return top._replace(esc=esc) if ranges else None
        q = pattern.feed(top.q, char.encode("utf-8")) if pattern else None
        if pattern and q is None:
            return None
        return top._replace(esc="", q=q, text=_text(top, char))
    if b not in utf8_next_bytes(top.u8) or b < 0x20:
        return None
    count = top.count if top.u8 else min(top.count + 1, _count_limit(spec))
    if b == BACKSLASH:
        return top._replace(esc="\\", count=count)
    q = pattern.step(top.q, b) if pattern else None
    if pattern and q is None:
        return None
    u8 = top.u8 + bytes([b])
    if len(u8) == _leading_len(u8[0]):
        return top._replace(q=q, count=count, text=_text(top, u8.decode("utf-8")), u8=b"")
    return top._replace(q=q, count=count, u8=u8)


def _text(top: SFrame, char: str) -> str | None:
    """The tracked text after `char`: kept for values and declared key names only."""
    spec = top.spec
    if not _tracks_text(spec) or top.text is None:
        return "" if not _tracks_text(spec) else None
    text = top.text + char
    if isinstance(spec, KeySpec) and spec.values is None:
        if not any(n.startswith(text) for n in spec.names):
            return None
    return text


def _leading_len(lead: int) -> int:
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _string_live(f: SFrame, canonical: bool = False) -> bool:
    """Whether the string can still be closed under its constraints."""
    spec = f.spec
    ranges = _escape(f.esc, canonical)[1] if f.esc else (utf8_ranges(f.u8) if f.u8 else None)
    if _tracks_text(spec):
        values = spec.values
        if values is None:
            return True
        n = len(f.text)
        if ranges is None:
            return any(v.startswith(f.text) for v in values)
        return any(len(v) > n and v.startswith(f.text) and _in_ranges(ord(v[n]), ranges) for v in values)
    if spec.max_len is not None and f.count > spec.max_len:
        return False
    pattern = spec.pattern
    if pattern is None:
        return True
    if f.esc:
        return any(pattern.length_ok(q, f.count, spec.min_len, spec.max_len)
                   for q in pattern.targets(f.q, ranges))
    return pattern.length_ok(f.q, f.count, spec.min_len, spec.max_len)


__all__ = ["initial_state", "step", "accepts"]
