"""Fewest bytes from a JSON recognizer state to a complete document (a lower bound),
for the token bound of `CoercedJson` (`fast_paths.TokensToFinish`).

A state is a set of configurations, each a stack of frames; the bound is the least
over the configurations of the bytes each open frame must still read, counted from
the schema alone:

- an open string: its closing quote, and one byte per code point below `minLength`;
- a literal (`true`, `null`, ...): its unread bytes; a number: none (it may be done);
- an array: `]`, and one byte per item still owed to `minItems`;
- an object: `}`; a read key its `:` and a value byte; a required key not yet
  written `"key":` and a value byte (the one being typed excepted);
- the document: one value byte before any value is opened.

Every count is bytes that any completion must read, so the sum never exceeds the
fewest bytes to a complete document; a schema's whole-document check
(`JsonSchema.document_check`) only removes documents. The token bound itself is
`cfg._cfg_budget.token_rows`.
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
from genlm.control.potential.built_in.json_schema._json_nodes import Str
from genlm.control.potential.built_in.json_schema._json_string import SFrame

INF = float("inf")


def _key_cost(key: str) -> int:
    return len(key.encode()) + 4  # two quotes, a colon and a value byte


def _object_owes(frame: OFrame, typing_key: bool) -> int:
    owed = 1
    if frame.phase == KEY and not typing_key:
        owed += 2  # the colon and a value byte
    elif frame.phase == COLONED:
        owed += 1
    keys = sorted((_key_cost(k) for k in frame.alt.required - frame.seen), reverse=True)
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
        return 1 + max(0, frame.alt.min_items - frame.count - open_item)
    if isinstance(frame, OFrame):
        return _object_owes(frame, typing_key=frame.phase == KEY and isinstance(above, SFrame))
    if isinstance(frame, Doc):
        return 1 if frame.phase == OPEN else 0
    return 0  # a number, which may already be complete


def stack_owes(stack: tuple) -> int:
    """Bytes that every completion of one configuration reads."""
    return sum(_frame_owes(f, stack[i + 1] if i + 1 < len(stack) else None) for i, f in enumerate(stack))


def fewest_bytes(state) -> float:
    """A lower bound on the bytes from `state` to a complete document (inf: dead)."""
    if not state:
        return INF
    return float(min(stack_owes(s) for s in state))


__all__ = ["fewest_bytes", "stack_owes"]
