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
  (excepted the one being typed, where the typed text so far begins its name);
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

from genlm.control.constraints.json_schema._json_machine import (
    COLONED,
    KEY,
    NEXT,
    OPEN,
    VALUE,
    AFrame,
    Doc,
    LFrame,
    OFrame,
)
from genlm.control.constraints.json_schema._json_nodes import Arr, Lit, Obj, Str
from genlm.control.constraints.json_schema._json_string import SFrame

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
        text = typing.text
        could = [keys[k] for k in keys if text is not None and k.startswith(text)]
        if could:
            owed -= max(could)
    owed += sum(keys.values())
    if frame.phase == NEXT and not keys and typing is None:
        owed += 4  # after a comma, some key: `"":` and a value byte at least
    return owed


def _frame_owes(frame, above) -> int:
    if isinstance(frame, SFrame):
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


__all__ = ["fewest_bytes", "mandated_bytes", "mandated_weight", "stack_owes"]
