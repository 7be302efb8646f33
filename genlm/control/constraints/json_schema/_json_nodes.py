"""The compiled form of a JSON schema: a graph of value nodes.

A `Node` is a union of alternatives, each one JSON type with its constraints
(`Lit`, `Num`, `Str`, `Obj`, `Arr`); `_json_schema` builds the graph and
`_json_machine` reads documents against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from genlm.control.constraints.json_schema._json_number import Bounds, reachable
from genlm.control.constraints.json_schema._json_string import Pattern


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
    """An array of `min_items..max_items` items: item `i` is a value of `fixed[i]`
    while `i < len(fixed)`, then of `items` (None: no more items)."""

    items: Node | None
    min_items: int = 0
    max_items: int | None = None
    fixed: tuple = ()


def const_alts(values: list, integer: bool) -> tuple:
    """Alternatives accepting exactly the values `equal` (as jsonschema compares) to one of
    `values`; numbers compare as exact decimals, `integer` restricts their spelling."""
    alts: list = []
    strings = frozenset(v for v in values if isinstance(v, str))
    numbers = []
    for v in values:
        if v is None or isinstance(v, bool):
            alts.append(Lit(b"null" if v is None else (b"true" if v else b"false")))
        elif isinstance(v, (int, float)):
            numbers.append(decimal(v, "enum value", "#"))
        elif isinstance(v, list):
            items = tuple(Node(const_alts([x], False)) for x in v)
            alts.append(Arr(None, len(v), len(v), items))
        elif isinstance(v, dict):
            props = {k: Node(const_alts([x], False)) for k, x in v.items()}
            alts.append(Obj(props, frozenset(v), None))
    if strings:
        alts.append(Str(values=strings))
    if numbers:
        alts.append(Num(integer, Bounds(), tuple(numbers)))
    return tuple(alts)


def decimal(x: Any, keyword: str, where: str) -> Decimal:
    """The exact decimal a schema number spells (a float by its shortest repr)."""
    d = Decimal(repr(x)) if isinstance(x, float) else Decimal(x)
    if not d.is_finite():
        raise ValueError(f"{keyword} at {where} must be a finite number, got {x!r}")
    return d


def _nonempty(alt: Any, live: set) -> bool:
    def ok(node: Node) -> bool:
        return any(id(a) in live for a in node.alts)

    if isinstance(alt, Lit):
        return True
    if isinstance(alt, Num):
        return reachable("", alt)
    if isinstance(alt, Str):
        if alt.values is not None:
            return bool(alt.values)
        if alt.max_len is not None and alt.min_len > alt.max_len:
            return False
        return alt.pattern is None or alt.pattern.length_ok(alt.pattern.start, 0, alt.min_len, alt.max_len)
    if isinstance(alt, Obj):
        for r in alt.required:
            node = alt.props.get(r, alt.additional)
            if node is None or not ok(node):
                return False
        return True
    if alt.max_items is not None and alt.min_items > alt.max_items:
        return False
    head = alt.fixed[: alt.min_items]
    if not all(ok(n) for n in head):
        return False
    return alt.min_items <= len(alt.fixed) or (alt.items is not None and ok(alt.items))


def _subnodes(alt: Any):
    if isinstance(alt, Obj):
        yield from alt.props.values()
        if alt.additional is not None:
            yield alt.additional
    elif isinstance(alt, Arr):
        yield from alt.fixed
        if alt.items is not None:
            yield alt.items


def prune(nodes: list[Node]) -> None:
    """Drop every alternative that admits no finite value (least fixpoint)."""
    seen: dict[int, Node] = {}
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen[id(n)] = n
            stack.extend(s for a in n.alts for s in _subnodes(a))
    alts = {id(a): a for n in seen.values() for a in n.alts}
    live: set = set()
    changed = True
    while changed:
        changed = False
        for key, a in alts.items():
            if key not in live and _nonempty(a, live):
                live.add(key)
                changed = True
    for n in seen.values():
        n.alts = tuple(a for a in n.alts if id(a) in live)



__all__ = ["Node", "Lit", "Num", "Str", "Obj", "Arr", "const_alts", "prune", "decimal"]
