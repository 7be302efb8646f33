"""JSON Schema compiled to a graph of value nodes for the JSON recognizer.

A `Node` is a union of alternatives, each one JSON type with its constraints
(`Lit`, `Num`, `Str`, `Obj`, `Arr`). Local `$ref`s become shared nodes, so
recursive schemas give cyclic graphs. After compiling, alternatives that admit no
value are pruned (a least fixpoint, so a property that is required all the way
down is empty).

The keywords are those of the schema's dialect (`$schema`, 2020-12 by default, as
`jsonschema` reads it); every other key is an annotation and is ignored, as JSON
Schema specifies. Keywords are read exactly where the recognizer can check them on
prefixes (see `_json_typed`; `enum`/`const` with any siblings; `anyOf`; `$ref`;
`allOf` and `$ref` beside other keywords where `_json_combine.merge` is exact;
`oneOf` whose branches take disjoint JSON types). The others are read as a
superset and named in `Compiled.inexact`: the recognizer then accepts every prefix
of a valid document (and some more), and `complete` also checks the whole document
against the schema (`_json_residual`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from genlm.control.constraints.json_schema._json_combine import merge
from genlm.control.constraints.json_schema._json_format import format_checker
from genlm.control.constraints.json_schema._json_guard import (
    check_document,
    no_retrieval_registry,
)
from genlm.control.constraints.json_schema._json_nodes import (
    Arr,
    Lit,
    Node,
    Num,
    Obj,
    Str,
    const_alts,
    prune,
)
from genlm.control.constraints.json_schema._json_number import Bounds
from genlm.control.constraints.json_schema._json_typed import typed_alts

ANNOTATIONS = frozenset(
    {"title", "description", "$schema", "$id", "$defs", "definitions", "default",
     "examples", "$comment", "readOnly", "writeOnly", "deprecated"}
)
UNSUPPORTED = ("$dynamicRef", "$recursiveRef")
LEGACY_REF = ("Draft4Validator", "Draft6Validator", "Draft7Validator")  # $ref hides its siblings
MAX_ENUM_NUMBERS = 2000  # number prefixes are checked against each allowed value
MAX_NODES = 50_000  # compiled nodes, counting every inlined copy
MAX_INLINED = 5_000  # $refs inlined beside other keywords or in allOf
MAX_INLINE_DEPTH = 50  # refs inlined inside one another (Python frames stay bounded)


class Compiled(NamedTuple):
    """The compiled schema and the keywords it reads only as a superset on prefixes."""

    root: Node
    inexact: frozenset


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

        cls = validator_for(root)
        self.root = root
        self.local = local or {}
        known = set(cls.VALIDATORS) | {"exclusiveMinimum", "exclusiveMaximum"}  # draft 4 flags
        if "if" in known:  # read by the `if` keyword of jsonschema
            known |= {"then", "else"}
        self.known = frozenset(known)
        self.legacy_ref = cls.__name__ in LEGACY_REF
        self.prefix_items = "prefixItems" in self.known
        self.validator = cls(root, registry=no_retrieval_registry(), format_checker=format_checker())
        self.inlining: list[tuple[str, int]] = []  # refs inlined, with the value depth
        self.level = 0
        self.self_reaching: dict[str, bool] = {}
        self.refs: dict[str, Node] = {}
        self.pending: list[tuple[Node, Any, str]] = []
        self.unions: list[tuple[Node, list]] = []
        self.one_of: list[list[Node]] = []
        self.any = _any_node()
        self.nodes: list[Node] = [self.any]
        self.inexact: set[str] = set()
        self.synthetic: dict[int, dict] = {}
        self.inlined = 0

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

    def keywords(self, schema: dict, where: str) -> dict:
        """The keywords of the dialect in `schema` (a `$ref` alone before 2019-09)."""
        keys = {k: v for k, v in schema.items() if k in self.known}
        for k in UNSUPPORTED:
            if k in keys:
                raise ValueError(f"JSON Schema keyword {k!r} at {where} is not supported by JsonSchema")
        if self.legacy_ref and "$ref" in keys and id(schema) not in self.synthetic:
            return {"$ref": keys["$ref"]}
        return keys

    def _made(self, schema: dict) -> dict:
        """Mark a schema object built here (its `$ref` keeps its siblings)."""
        self.synthetic[id(schema)] = schema
        return schema

    def node(self, schema: Any, where: str) -> Node:
        if schema is True:
            return self.any
        if schema is False:
            return self._new(())
        if len(self.nodes) > MAX_NODES:
            raise ValueError(f"the JSON schema compiles to more than {MAX_NODES} nodes (a size limit)")
        keys = self.keywords(schema, where)
        if "enum" in keys or "const" in keys:
            return self._new(self._enum(keys, where))
        if "$ref" in keys and len(keys) == 1:
            return self._ref(keys["$ref"], where)
        if "$ref" in keys or "allOf" in keys:
            return self._flat(keys, where)
        if "anyOf" in keys or "oneOf" in keys:
            return self._branches(keys, where)
        if "not" in keys:
            if keys["not"] is True or (isinstance(keys["not"], dict)
                                       and not self.keywords(keys["not"], where)):
                return self._new(())
            self.inexact.add("not")
        if "if" in keys:
            return self._conditional(keys, where)
        return self._new(tuple(typed_alts(self, keys, where)))

    def _flat(self, keys: dict, where: str) -> Node:
        flat, refs = self.flatten(keys, where, [])
        if flat is False:
            return self._new(())
        self.inlining.extend((r, self.level) for r in refs)
        try:
            return self.node(self._made(flat), where)
        finally:
            del self.inlining[len(self.inlining) - len(refs):]

    def child(self, schema: Any, where: str) -> Node:
        """The node of a property's or an item's schema (one level into the value)."""
        self.level += 1
        try:
            return self.node(schema, where)
        finally:
            self.level -= 1

    def flatten(self, keys: dict, where: str, chain: list) -> tuple[Any, list]:
        """`keys` with its `$ref` and `allOf` parts merged in (False: no value), and
        the refs inlined. A ref met again on the way is dropped (a superset)."""
        out = {k: v for k, v in keys.items() if k not in ("$ref", "allOf")}
        parts = ([{"$ref": keys["$ref"]}] if "$ref" in keys else []) + list(keys.get("allOf", ()))
        used: list[str] = []
        for part in parts:
            if part is True:
                continue
            if part is False:
                return False, used
            part = self.keywords(part, where)
            if "$ref" in part:
                part, refs = self._inline(part, where, chain)
                used += refs
                if part is False:
                    return False, used
            out = merge(out, part, self.inexact)
        return out, used

    def _inline(self, part: dict, where: str, chain: list) -> tuple[Any, list]:
        ref = part["$ref"]
        rest = {k: v for k, v in part.items() if k != "$ref"}
        if ref in chain or self._reaches_itself(ref):
            raise ValueError(
                f"$ref {ref!r} at {where} refers back to itself through $refs with sibling "
                "keywords (or allOf) without entering a property or an item; such a schema "
                "has no meaning"
            )
        if any(r == ref for r, _ in self.inlining) or len(self.inlining) > MAX_INLINE_DEPTH:
            self.inexact.add("$ref")  # met again while inlined: checked on the document
            return self.flatten(rest, where, chain) if "allOf" in rest else (rest, [])
        self.inlined += 1
        if self.inlined > MAX_INLINED or len(chain) > MAX_INLINE_DEPTH:
            raise ValueError(
                f"the JSON schema inlines more than {MAX_INLINED} $refs (or nests them deeper "
                f"than {MAX_INLINE_DEPTH}) beside other keywords or in allOf (a size limit)"
            )
        target = self.resolve(ref, where)
        if target is False:
            return False, [ref]
        inner = {} if target is True else self.keywords(target, ref)
        chain.append(ref)
        try:
            flat, refs = self.flatten(self._made(merge(rest, inner, self.inexact)), where, chain)
        finally:
            chain.pop()
        return flat, [ref] + refs

    def _reaches_itself(self, ref: str) -> bool:
        """Whether the schema at `ref` reaches `ref` again through `$ref` and the
        in-place applicators (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`)
        alone: then it has no meaning (validating it never enters the value)."""
        hit = self.self_reaching.get(ref)
        if hit is None:
            hit = self.self_reaching[ref] = self._walk_in_place(ref)
        return hit

    def _walk_in_place(self, ref: str) -> bool:
        stack, seen = [self.resolve(ref, ref)], set()
        while stack and len(seen) < MAX_NODES:
            schema = stack.pop()
            if not isinstance(schema, dict) or id(schema) in seen:
                continue
            seen.add(id(schema))
            keys = self.keywords(schema, ref)
            target = keys.get("$ref")
            if isinstance(target, str):
                if target == ref:
                    return True
                stack.append(self.resolve(target, ref))
            for k in ("allOf", "anyOf", "oneOf"):
                stack.extend(keys.get(k, ()))
            stack.extend(keys[k] for k in ("not", "if", "then", "else") if k in keys)
        return False

    def _branches(self, keys: dict, where: str) -> Node:
        kw = "anyOf" if "anyOf" in keys else "oneOf"
        rest = {k: v for k, v in keys.items() if k != kw}
        branches = []
        for i, branch in enumerate(keys[kw]):
            if branch is False:
                continue
            merged = rest if branch is True else self._made(
                merge(rest, self.keywords(branch, where), self.inexact))
            branches.append(self.node(merged, f"{where}/{kw}/{i}"))
        if kw == "oneOf" and len(branches) > 1:
            self.one_of.append(branches)
        return self.union(branches)

    def _conditional(self, keys: dict, where: str) -> Node:
        """`if`/`then`/`else` as the superset `rest ∧ (then ∨ else)`."""
        self.inexact.add("if")
        rest = {k: v for k, v in keys.items() if k not in ("if", "then", "else")}
        then, other = keys.get("then", True), keys.get("else", True)
        if then is True or other is True:
            return self.node(self._made(rest), where)
        return self.node(self._made(merge(rest, {"anyOf": [then, other]}, self.inexact)), where)

    def union(self, members: list) -> Node:
        """A node whose alternatives are all of `members`' (filled once refs are)."""
        node = self._new(tuple(a for n in members for a in n.alts))
        self.unions.append((node, members))
        return node

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
        if self.legacy_ref and "$ref" in rest and len(rest) > 1:  # siblings of a merged $ref
            rest = {"allOf": [{"$ref": rest.pop("$ref")}, rest]}
        if rest:  # else every value stays
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

    def run(self) -> Node:
        top = self.node(self.root, "#")
        aliases = []
        while self.pending:
            node, target, ref = self.pending.pop()
            aliases.append((node, self.node(target, ref)))
        changed = True
        while changed:  # refs to refs and unions of refs: copy until nothing changes
            changed = False
            for node, source in aliases:
                if node.alts != source.alts:
                    node.alts, changed = source.alts, True
            for node, members in self.unions:
                alts = tuple(dict.fromkeys(a for n in members for a in n.alts))
                if alts != node.alts:
                    node.alts, changed = alts, True
        prune(self.nodes)
        if any(not _disjoint(branches) for branches in self.one_of):
            self.inexact.add("oneOf")
        return top


def _kinds(node: Node) -> set:
    return {a.text if isinstance(a, Lit) else type(a) for a in node.alts}


def _disjoint(branches: list) -> bool:
    """Whether no JSON value can be in two branches (their JSON types are disjoint)."""
    seen: set = set()
    for n in branches:
        kinds = _kinds(n)
        if kinds & seen:
            return False
        seen |= kinds
    return True


def _json_equal(a: Any, b: Any) -> bool:
    from jsonschema._utils import equal

    return bool(equal(a, b))


def compile_schema(schema: Any) -> Compiled:
    """Validate `schema` and compile it (see the module docstring).

    Raises:
        ValueError: naming the problem: an invalid schema (`InvalidSchemaError`, also a
            `jsonschema.exceptions.SchemaError`), an unsupported keyword or dialect, a
            non-local `$ref`, a limit exceeded, or a schema that accepts no document.
    """
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"a JSON schema is a dict or a bool, got {type(schema).__name__}")
    cls = validator_for(schema)
    if cls.__name__ == "Draft3Validator":
        raise ValueError("JSON Schema draft 3 ($schema draft-03) is not supported; JsonSchema "
                         "reads drafts 4, 6 and 7, 2019-09 and 2020-12")
    local = check_document(schema, "id" if cls.__name__ == "Draft4Validator" else "$id")
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        from genlm.control.constraints.json_schema._json_errors import InvalidSchemaError

        path = "/".join(str(p) for p in e.path)
        message = f"invalid JSON schema at '#/{path}': {e.message}"
        raise InvalidSchemaError.from_error(message, e) from None
    except RecursionError:  # `re.compile` of a deeply nested `pattern` (format "regex")
        raise ValueError("invalid JSON schema: a pattern is nested too deeply to compile") from None
    except OverflowError as e:  # `re.compile` of a repeat count beyond 2**32
        raise ValueError(f"invalid JSON schema: a pattern is too large to compile ({e})") from None
    compiler = Compiler(schema, local)
    top = compiler.run()
    if not top.alts:
        raise ValueError("the JSON schema accepts no document")
    return Compiled(top, frozenset(compiler.inexact))


__all__ = ["Node", "Lit", "Num", "Str", "Obj", "Arr", "Compiled", "compile_schema", "const_alts",
           "ANNOTATIONS"]
