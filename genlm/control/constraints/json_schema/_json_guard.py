"""Checks on a JSON schema before anything compiles, validates or retrieves it.

A schema is hostile input: `check_document` walks it once, iteratively (no
recursion), and stops at the first problem, before any `jsonschema` validator or
engine grammar is built from it:

- it is plain JSON data: dicts with `str` keys, lists, strings, finite numbers,
  booleans and None (a tuple, a set, NaN or an infinity is not JSON);
- it is bounded: at most `MAX_DEPTH` nested dicts/lists, `MAX_VALUES` values,
  `MAX_SUBSCHEMAS` schema objects (the metaschema check costs well under a millisecond
  each), `MAX_CHARS` characters of strings and keys, and integers of at most
  `MAX_INT_DIGITS` digits, so every later pass is linear in a bounded size;
- every `$ref` of a schema object (not one inside `enum`/`const` data) points
  inside the document: a `#...` fragment, or a URI that
  resolves against the root `$id` to the root itself. Anything else (`http:`,
  `file:`, a relative file name) is refused: no schema is ever fetched.

`NO_RETRIEVAL` is a `referencing.Registry` whose `retrieve` raises, for the
`jsonschema` validators built afterwards (a second lock on the same door).
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urldefrag, urljoin

MAX_DEPTH = 64
MAX_VALUES = 100_000
MAX_SUBSCHEMAS = 10_000
MAX_CHARS = 1_000_000
MAX_INT_DIGITS = 1000

# Where a value sits: a schema, a dict or list of schemas, or data (enum/const values).
SCHEMA, MAP, LIST, DATA = range(4)
MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                          "dependentSchemas", "dependencies"})
LIST_KEYWORDS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _path(parents: dict, node: int) -> str:
    """The JSON pointer of the value with walk index `node` (its last 8 steps)."""
    parts = []
    while node in parents:
        node, key = parents[node]
        parts.append(str(key).replace("~", "~0").replace("/", "~1"))
    if not parts:
        return "#"
    head = "#/" if len(parts) <= 8 else "#/.../"
    return head + "/".join(reversed(parts[:8]))


def _child_kind(kind: int, key: Any, child: Any) -> int:
    if kind != SCHEMA:
        return DATA if kind == DATA else SCHEMA
    if key in DATA_KEYWORDS:
        return DATA
    if key in MAP_KEYWORDS:
        return MAP
    if key in LIST_KEYWORDS or (key == "items" and isinstance(child, list)):
        return LIST
    return SCHEMA  # an unknown keyword's value is read as a schema: refs in it are checked


class _Walk:
    """One pass over the document: sizes, keys, scalars, `$ref`s and nested `$id`s."""

    def __init__(self, id_key: str = "$id"):
        self.id_key = id_key
        self.parents: dict[int, tuple[int, Any]] = {}
        self.count = self.chars = self.schemas = 0
        self.refs: list[tuple[int, str]] = []
        self.nested_id: tuple[int, str] | None = None

    def run(self, schema: Any) -> None:
        stack: list[tuple[int, Any, int, int]] = [(0, schema, 0, SCHEMA)]
        self.count = 1
        while stack:
            node, value, depth, kind = stack.pop()
            if not isinstance(value, (dict, list)):
                self.chars += _check_scalar(value, self.parents, node)
                if self.chars > MAX_CHARS:
                    raise ValueError(f"the JSON schema has more than {MAX_CHARS} characters of strings")
                continue
            if depth >= MAX_DEPTH and value:
                raise ValueError(
                    f"the JSON schema is nested deeper than {MAX_DEPTH} levels at "
                    f"{_path(self.parents, node)}"
                )
            if isinstance(value, dict):
                self._schema_dict(node, value, kind)
                items = value.items()
            else:
                items = enumerate(value)
            for key, child in items:
                self.parents[self.count] = (node, key)
                stack.append((self.count, child, depth + 1, _child_kind(kind, key, child)))
                self.count += 1
                if self.count > MAX_VALUES:
                    raise ValueError(f"the JSON schema has more than {MAX_VALUES} values (a size limit)")

    def _schema_dict(self, node: int, value: dict, kind: int) -> None:
        for key in value:
            if not isinstance(key, str):
                raise TypeError(
                    f"key {key!r} at {_path(self.parents, node)} is a {type(key).__name__}; "
                    "JSON object keys are strings"
                )
            self.chars += len(key)
        if kind != SCHEMA:
            return
        self.schemas += 1
        if self.schemas > MAX_SUBSCHEMAS:
            raise ValueError(f"the JSON schema has more than {MAX_SUBSCHEMAS} subschemas (a size limit)")
        ref, sid = value.get("$ref"), value.get(self.id_key)
        if isinstance(ref, str):
            self.refs.append((node, ref))
        if isinstance(sid, str) and node != 0 and not sid.startswith("#") and self.nested_id is None:
            self.nested_id = (node, sid)


def check_document(schema: Any, id_key: str = "$id") -> dict[str, str]:
    """Check `schema` (see the module docstring) and return its `$id`-relative
    `$ref`s rewritten as local ones (`{ref: "#fragment"}`). `id_key` is the keyword
    that sets a base URI: `$id`, or `id` in draft 4.

    Raises:
        TypeError: a value that is not JSON data, or a non-`str` key (named).
        ValueError: a non-finite number, a limit exceeded (named), or a `$ref` that
            does not stay inside the document.
    """
    walk = _Walk(id_key)
    walk.run(schema)
    root_id = schema.get(id_key) if isinstance(schema, dict) else None
    local: dict[str, str] = {}
    for node, ref in walk.refs:
        target = _local_ref(ref, root_id)
        if target is None:
            raise ValueError(
                f"$ref {ref!r} at {_path(walk.parents, node)} does not point inside the schema; "
                "JsonSchema never retrieves schemas (no network or file access)"
            )
        if walk.nested_id is not None:
            node, sid = walk.nested_id
            raise ValueError(
                f"{id_key} {sid!r} at {_path(walk.parents, node)} sets a new base URI for the "
                "$refs under it; a $ref beside a nested $id is not supported"
            )
        if target != ref:
            local[ref] = target
    return local


def _check_scalar(value: Any, parents: dict, node: int) -> int:
    """The characters in `value`, after checking it is a JSON scalar."""
    if isinstance(value, str):
        return len(value)
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        if value.bit_length() > 3.33 * MAX_INT_DIGITS:
            raise ValueError(
                f"integer at {_path(parents, node)} has more than {MAX_INT_DIGITS} digits"
            )
        return 0
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(
                f"number {value!r} at {_path(parents, node)} is not finite "
                "(JSON has no NaN or Infinity)"
            )
        return 0
    raise TypeError(
        f"value at {_path(parents, node)} is a {type(value).__name__}, which is not JSON "
        "(a JSON schema holds dicts, lists, strings, numbers, booleans and None)"
    )


def _local_ref(ref: str, root_id: Any) -> str | None:
    """`ref` as a `#fragment` of the root document, or None when it points elsewhere."""
    if ref.startswith("#"):
        return ref
    if not isinstance(root_id, str) or not root_id:
        return None
    base, _ = urldefrag(root_id)
    url, fragment = urldefrag(urljoin(root_id, ref))
    return "#" + fragment if url == base else None


def _refuse(uri: str):
    raise ValueError(f"JsonSchema does not retrieve {uri!r} (no network or file access)")


def no_retrieval_registry():
    """A `referencing.Registry` that refuses every retrieval."""
    from referencing import Registry

    return Registry(retrieve=_refuse)


__all__ = ["check_document", "no_retrieval_registry", "MAX_DEPTH", "MAX_VALUES", "MAX_SUBSCHEMAS",
           "MAX_CHARS", "MAX_INT_DIGITS"]
