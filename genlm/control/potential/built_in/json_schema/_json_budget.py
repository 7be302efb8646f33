"""Fewest bytes from a JSON recognizer state to a complete document (a lower bound),
for the token bound of `CoercedJson` (`fast_paths.TokensToFinish`).

A state is a set of configurations, each a stack of frames; the bound is the least
over the configurations of the bytes each open frame must still read, counted from
the schema alone:

- an open string: its closing quote, and one byte per code point below `minLength`;
- a literal (`true`, `null`, ...): its unread bytes; a number: none (it may be done);
- an array: `]`, and one byte per item still owed to `minItems` (one after a comma);
- an object: `}`; a read key its `:` and its value; a required key not yet written
  `"key":` and its value (the one being typed excepted);
- the document: its value, before one is opened.

A value not yet opened counts the fewest bytes of its schema node (`value_bytes`:
the quotes and `minLength` of a string, a literal's spelling, an object's braces and
required keys, an array's brackets and `minItems` items, one byte for a number).

Every count is bytes that any completion must read, so the sum never exceeds the
fewest bytes to a complete document; a schema's whole-document check
(`JsonSchema.document_check`) only removes documents. `CoercedJson` reads it at the
state after each next token `y`: at least `⌈L(ctx·y) / longest⌉` tokens follow `y`.
"""

from __future__ import annotations

from genlm.control.potential.built_in.json_schema._json_machine import (
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
from genlm.control.potential.built_in.json_schema._json_nodes import Arr, Lit, Obj, Str
from genlm.control.potential.built_in.json_schema._json_string import SFrame

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


def _object_owes(frame: OFrame, typing_key: bool) -> int:
    owed, alt = 1, frame.alt
    value = 1
    if frame.key is not None and frame.key in alt.props:
        value = value_bytes(alt.props[frame.key])
    if frame.phase == KEY and not typing_key:
        owed += 1 + value  # the colon and the value
    elif frame.phase == COLONED:
        owed += value
    keys = sorted((_key_cost(k, alt.props.get(k)) for k in alt.required - frame.seen), reverse=True)
    if typing_key and keys:
        keys = keys[1:]  # the key being typed may be one of them
    owed += sum(keys)
    if frame.phase == NEXT and not keys and not typing_key:
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
        return _object_owes(frame, typing_key=frame.phase == KEY and isinstance(above, SFrame))
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


__all__ = ["fewest_bytes", "stack_owes"]
