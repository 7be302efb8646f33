"""The compiled form of a JSON schema: a graph of value nodes.

A `Node` is a union of alternatives, each one JSON type with its constraints
(`Lit`, `Num`, `Str`, `Obj`, `Arr`); `_json_schema` builds the graph and
`_json_machine` reads documents against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from genlm.control.potential.built_in.json_schema._json_number import Bounds
from genlm.control.potential.built_in.json_schema._json_string import Pattern


class Node:
    """A schema: the union of `alts` (identity-hashed; filled after construction)."""

    __slots__ = ("alts", "__weakref__")

    def __init__(self, alts: tuple = ()):
        self.alts = alts

    def __repr__(self) -> str:
        return f"Node({len(self.alts)} alternatives)"


@dataclass(frozen=True, eq=False)
class Lit:
    """`true`, `false` or `null`, spelled exactly."""

    text: bytes


@dataclass(frozen=True, eq=False)
class Num:
    """A number in `bounds`; `integer`: no fraction or exponent in the spelling;
    `values`: the allowed values (exact decimals), or None for any."""

    integer: bool
    bounds: Bounds
    values: tuple | None = None


@dataclass(frozen=True, eq=False)
class Str:
    """A string of `min_len..max_len` code points matching `pattern`, or one of `values`."""

    min_len: int = 0
    max_len: int | None = None
    pattern: Pattern | None = None
    values: frozenset | None = None


@dataclass(frozen=True, eq=False)
class Obj:
    """An object: known `props`, `required` names, `additional` (None: no other keys)."""

    props: dict
    required: frozenset
    additional: Node | None


@dataclass(frozen=True, eq=False)
class Arr:
    """An array of `items` (`min_items..max_items` of them), or exactly `fixed` items."""

    items: Node | None
    min_items: int = 0
    max_items: int | None = None
    fixed: tuple | None = None


__all__ = ["Node", "Lit", "Num", "Str", "Obj", "Arr"]
