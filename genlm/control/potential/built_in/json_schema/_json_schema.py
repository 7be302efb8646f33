"""JSON Schema compiled to a graph of value nodes for the JSON recognizer.

A `Node` is a union of alternatives, each one JSON type with its constraints
(`Lit`, `Num`, `Str`, `Obj`, `Arr`). Local `$ref`s become shared nodes, so
recursive schemas give cyclic graphs. After compiling, alternatives that admit no
value are pruned (a least fixpoint, so a property that is required all the way
down is empty), which makes prefix checks exact: every live recognizer state can
still be completed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from genlm.control.potential.built_in.json_schema._json_guard import (
    check_document,
    no_retrieval_registry,
)
from genlm.control.potential.built_in.json_schema._json_nodes import Arr, Lit, Node, Num, Obj, Str
from genlm.control.potential.built_in.json_schema._json_number import Bounds, reachable
from genlm.control.potential.built_in.json_schema._json_string import Pattern

ANNOTATIONS = frozenset(
    {"title", "description", "$schema", "$id", "$defs", "definitions", "default",
     "examples", "$comment", "readOnly", "writeOnly", "deprecated"}
)
ASSERTIONS = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
     "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
     "maxLength", "pattern", "items", "minItems", "maxItems", "$ref"}
)
TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
MAX_ENUM_NUMBERS = 2000  # number prefixes are checked against each allowed value


def _any_node() -> Node:
    node = Node()
    node.alts = (
        Lit(b"null"), Lit(b"true"), Lit(b"false"), Num(False, Bounds()), Str(),
        Obj({}, frozenset(), node), Arr(node),
    )
    return node


class Compiler:
    """Compiles one root schema (see `compile_schema`)."""

    def __init__(self, root: Any, local: dict[str, str] | None = None):
        from jsonschema.validators import validator_for

        self.root = root
        self.local = local or {}
        self.validator = validator_for(root)(root, registry=no_retrieval_registry())
        self.inlining: list[str] = []
        self.refs: dict[str, Node] = {}
        self.pending: list[tuple[Node, Any, str]] = []
        self.any = _any_node()
        self.nodes: list[Node] = [self.any]

    def resolve(self, ref: str, where: str) -> Any:
        ref = self.local.get(ref, ref)
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ValueError(f"$ref {ref!r} at {where} is not a local reference ('#...')")
        target = self.root
        for part in [p for p in ref[1:].split("/") if p != ""]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            elif isinstance(target, dict) and part in target:
                target = target[part]
            else:
                raise ValueError(f"$ref {ref!r} at {where} does not resolve in the schema")
        if not isinstance(target, (dict, bool)):
            raise ValueError(f"$ref {ref!r} at {where} points to a non-schema")
        return target

    def node(self, schema: Any, where: str) -> Node:
        if schema is True:
            return self.any
        if schema is False:
            return self._new(())
        unknown = [k for k in schema if k not in ANNOTATIONS and k not in ASSERTIONS]
        if unknown:
            raise ValueError(
                f"JSON Schema keyword {unknown[0]!r} at {where} is not supported by "
                "JsonSchema (it would not be enforced)"
            )
        if "$ref" in schema:
            rest = _assertions(schema, "$ref")
            if not rest:
                return self._ref(schema["$ref"], where)
            return self._inline_ref(schema["$ref"], rest, where)
        if "anyOf" in schema:
            rest = _assertions(schema, "anyOf")
            alts = []
            for i, branch in enumerate(schema["anyOf"]):
                if branch is False:
                    continue
                merged = rest if branch is True else _merge(rest, branch, "anyOf", where)
                alts.extend(self.node(merged, f"{where}/anyOf/{i}").alts)
            return self._new(tuple(alts))
        if "enum" in schema or "const" in schema:
            return self._new(self._enum(schema, where))
        return self._new(tuple(self._typed(schema, where)))

    def _inline_ref(self, ref: str, rest: dict, where: str) -> Node:
        """`$ref` with sibling assertions: the target merged with them, compiled in place
        (a cycle of such refs has no finite expansion and is refused)."""
        if ref in self.inlining:
            raise ValueError(
                f"$ref {ref!r} at {where} refers back to itself through $refs with sibling "
                "keywords; such a cycle is not supported"
            )
        target = self.resolve(ref, where)
        if target is False:
            return self._new(())
        self.inlining.append(ref)
        try:
            return self.node(_merge(rest, {} if target is True else target, "$ref", where), where)
        finally:
            self.inlining.pop()

    def _ref(self, ref: str, where: str) -> Node:
        node = self.refs.get(ref)
        if node is None:
            node = self.refs[ref] = Node()
            self.nodes.append(node)
            self.pending.append((node, self.resolve(ref, where), ref))
        return node

    def _new(self, alts: tuple) -> Node:
        node = Node(alts)
        self.nodes.append(node)
        return node

    def _enum(self, schema: dict, where: str) -> tuple:
        values = list(schema.get("enum", [])) if "enum" in schema else [schema["const"]]
        if "enum" in schema and "const" in schema:
            values = [v for v in values if _json_equal(v, schema["const"])]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if any(k in ASSERTIONS for k in rest):  # else every value stays
            check = self.validator.evolve(schema=rest)
            values = [v for v in values if check.is_valid(v)]
        numbers = sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numbers > MAX_ENUM_NUMBERS:
            raise ValueError(
                f"enum at {where} has {numbers} numbers, more than MAX_ENUM_NUMBERS = "
                f"{MAX_ENUM_NUMBERS} (each number prefix is checked against each of them)"
            )
        types = schema.get("type")
        types = [types] if isinstance(types, str) else types
        integer = bool(types) and "integer" in types and "number" not in types
        return const_alts(values, integer)

    def _typed(self, schema: dict, where: str):
        types = schema.get("type", TYPES)
        types = [types] if isinstance(types, str) else list(types)
        if "null" in types:
            yield Lit(b"null")
        if "boolean" in types:
            yield Lit(b"true")
            yield Lit(b"false")
        if "number" in types or "integer" in types:
            yield Num("number" not in types, _bounds(schema, where))
        if "string" in types:
            pattern = schema.get("pattern")
            yield Str(
                schema.get("minLength", 0),
                schema.get("maxLength"),
                Pattern.compile(pattern, where) if pattern is not None else None,
            )
        if "object" in types:
            props = {k: self.node(v, f"{where}/properties/{k}") for k, v in
                     schema.get("properties", {}).items()}
            extra = schema.get("additionalProperties", True)
            additional = None if extra is False else self.node(extra, f"{where}/additionalProperties")
            yield Obj(props, frozenset(schema.get("required", ())), additional)
        if "array" in types:
            items = schema.get("items", True)
            if isinstance(items, list):
                raise ValueError(f"'items' as a list (tuple validation) at {where} is not supported")
            yield Arr(self.node(items, f"{where}/items"), schema.get("minItems", 0),
                      schema.get("maxItems"))

    def run(self) -> Node:
        top = self.node(self.root, "#")
        aliases = []
        while self.pending:
            node, target, ref = self.pending.pop()
            aliases.append((node, self.node(target, ref)))
        for _ in aliases:  # a $ref to a $ref: copy until every chain is filled
            for node, source in aliases:
                node.alts = source.alts
        prune(self.nodes)
        return top


def _assertions(schema: dict, without: str) -> dict:
    return {k: v for k, v in schema.items() if k in ASSERTIONS and k != without}


def _merge(a: dict, b: dict, keyword: str, where: str) -> dict:
    out = dict(b)
    for k, v in a.items():
        if k in ANNOTATIONS:
            continue
        if k in out and not _json_equal(out[k], v):
            raise ValueError(
                f"keyword {k!r} beside {keyword!r} at {where} conflicts with the same keyword "
                f"inside it; combining them is not supported"
            )
        out[k] = v
    return out


def _json_equal(a: Any, b: Any) -> bool:
    from jsonschema._utils import equal

    return bool(equal(a, b))


def _decimal(x: Any, keyword: str, where: str) -> Decimal:
    d = Decimal(repr(x)) if isinstance(x, float) else Decimal(x)
    if not d.is_finite():
        raise ValueError(f"{keyword} at {where} must be a finite number, got {x!r}")
    return d


def _bounds(schema: dict, where: str) -> Bounds:
    lo = hi = None
    lo_incl = hi_incl = True
    if "minimum" in schema:
        lo = _decimal(schema["minimum"], "minimum", where)
    if "maximum" in schema:
        hi = _decimal(schema["maximum"], "maximum", where)
    x = schema.get("exclusiveMinimum")
    if isinstance(x, bool):  # draft 4: a flag on minimum
        lo_incl = not x
    elif x is not None:
        d = _decimal(x, "exclusiveMinimum", where)
        if lo is None or d >= lo:
            lo, lo_incl = d, False
    x = schema.get("exclusiveMaximum")
    if isinstance(x, bool):
        hi_incl = not x
    elif x is not None:
        d = _decimal(x, "exclusiveMaximum", where)
        if hi is None or d <= hi:
            hi, hi_incl = d, False
    return Bounds(lo, lo_incl, hi, hi_incl)


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
            numbers.append(_decimal(v, "enum value", "#"))
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
    if alt.fixed is not None:
        return all(ok(n) for n in alt.fixed)
    if alt.max_items is not None and alt.min_items > alt.max_items:
        return False
    return alt.min_items == 0 or ok(alt.items)


def _subnodes(alt: Any):
    if isinstance(alt, Obj):
        yield from alt.props.values()
        if alt.additional is not None:
            yield alt.additional
    elif isinstance(alt, Arr):
        yield from alt.fixed or (alt.items,)


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


def compile_schema(schema: Any) -> Node:
    """Validate `schema` and compile it to a `Node`.

    Raises:
        ValueError: naming the problem: an invalid schema, an unsupported keyword,
            a non-local `$ref`, or a schema that accepts no document.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"a JSON schema is a dict or a bool, got {type(schema).__name__}")
    local = check_document(schema)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        path = "/".join(str(p) for p in e.path)
        raise ValueError(f"invalid JSON schema at '#/{path}': {e.message}") from None
    except RecursionError:  # `re.compile` of a deeply nested `pattern` (format "regex")
        raise ValueError("invalid JSON schema: a pattern is nested too deeply to compile") from None
    except OverflowError as e:  # `re.compile` of a repeat count beyond 2**32
        raise ValueError(f"invalid JSON schema: a pattern is too large to compile ({e})") from None
    top = Compiler(schema, local).run()
    if not top.alts:
        raise ValueError("the JSON schema accepts no document")
    return top


__all__ = ["Node", "Lit", "Num", "Str", "Obj", "Arr", "compile_schema", "const_alts"]
