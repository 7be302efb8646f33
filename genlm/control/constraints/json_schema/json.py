"""`JsonSchema`: the JSON documents valid under a schema, as a Boolean potential over bytes."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from genlm.control._state_cache import PrefixStateCache
from genlm.control.constraints.fsa.wfsa import BYTE_VOCAB, check_byte_context
from genlm.control.constraints.json_schema._json_coerce import CoercedJson, Transitions
from genlm.control.constraints.json_schema._json_machine import initial_state
from genlm.control.constraints.json_schema._json_residual import DocumentCheck
from genlm.control.constraints.json_schema._json_schema import compile_schema
from genlm.control.constraints.json_schema._json_spelling import (
    DEFAULT_SPELLING,
    Spelling,
    check_spelling,
)
from genlm.control.constraints.recognizer import CachedRecognizer
from genlm.control.potential.coerce import Coerced, is_join
from genlm.control.potential.planner import EngineSource
from genlm.control.weights import NEG_INF, LazyWeights


class DocState(NamedTuple):
    """A carried state where whole documents are checked: the recognizer's state and
    the bytes read."""

    machine: frozenset
    data: bytes


class JsonSchema(CachedRecognizer):
    """JSON documents valid under a JSON Schema, over byte values (0..255).

        complete(ctx) = 0 iff the bytes are a valid document, else -inf
        prefix(ctx)   = 0 iff some valid document starts with the bytes, else -inf

    The schema is compiled to a deterministic pushdown recognizer (a set of frame
    stacks per prefix); its state after a context is cached and extended one byte
    at a time, and `logw_next` reads all 256 next bytes and EOS off that state, so
    its cost does not grow with the context.

    Language: UTF-8 JSON text (RFC 8259) spelled as `spelling` says
    (`_json_spelling`; docs/potentials.md):

    - "canonical": no whitespace outside strings, and each string
      (keys and values) spelled as `json.dumps(s, ensure_ascii=False)` spells it
      (raw characters; `\\"`, `\\\\`, `\\b \\t \\n \\f \\r`, and `\\u00XX`
      in lowercase hex for the other control characters; no other escape);
    - "compact": no whitespace outside strings, every JSON escape in strings;
    - "any" (the default): whitespace (space, tab, LF, CR) wherever JSON allows
      it, every JSON escape (RFC 8259's language, and 0.4.1's).

    Generate with "canonical": a small or untuned model given any whitespace tends
    to write whitespace until `max_tokens`, and given every escape, keys as
    `"\\u0061ge"`; with one spelling per string, the target's mass on a document
    is not split among its spellings (the command line's `--json-schema` spells
    canonically unless told otherwise). All three accept the same documents.
    `complete` agrees with `json.loads` +
    `jsonschema` validation except where this class is stricter or exact:

    - a key named in `properties` or `required` may appear once per object (a
      repeat is rejected); repeats of other keys are accepted, each occurrence
      validated (`json.loads` keeps the last);
    - `integer` means a number spelled without fraction or exponent (`1.0`, `1e2`
      are not integers here, though jsonschema accepts them);
    - numbers compare as exact decimals (no float rounding): `minimum`,
      `maximum`, `enum` and `const` read `1.0` and `1` as equal, and
      `0.10000000000000000001` as not equal to `0.1`; a float in the schema is the
      decimal its JSON text spells (its shortest repr: `maximum: 1e30` is 10**30),
      where `jsonschema` compares with the float's binary value
      (1000000000000000019884624838656);
    - `NaN`, `Infinity`, a byte-order mark and lone surrogate escapes are rejected;
    - `pattern` follows `re.search` with ASCII classes (`\\d` = `[0-9]`, as in
      ECMA-262); `multipleOf` is exact on decimals; `format` checks the regular
      formats of `_json_format` (`date`, `date-time`, `email`, `uuid`, `ipv4`,
      `relative-json-pointer`, ...) on prefixes, `idn-hostname` and `regex` on
      whole documents, and ignores the others, as 2020-12 allows.

    Keywords are those of the schema's dialect (`$schema`; 2020-12 by default);
    other keys are annotations and are ignored. `prefix` is exact for the keywords
    the recognizer reads on prefixes (`type`, bounds, lengths, `pattern`, `format`
    for the regular formats of `_json_format`, `enum`, `const`, `properties`,
    `required`, `additionalProperties`, `items`, `prefixItems`, `additionalItems`,
    `minItems`, `maxItems`, `anyOf`, local `$ref`, exact `allOf` merges, `oneOf`
    over disjoint types). The others (`not`, `uniqueItems`, `multipleOf`,
    `patternProperties`, `if`, ...: `superset_keywords`) are read as a superset on
    prefixes: no viable prefix is rejected, and `complete` (and EOS in the rows)
    checks the whole document with `jsonschema` (`_json_residual`). `$dynamicRef`,
    `$recursiveRef` and draft 3 raise ValueError naming them. `True` accepts every
    document; `False` (no document) raises ValueError.

    A schema is untrusted input, checked before anything is built from it (see
    `_json_guard`): it must be JSON data (dict keys `str`, finite numbers), at
    most 64 levels deep, 100,000 values and 10,000 subschemas; a `pattern`'s
    automaton is bounded (`_json_string.MAX_PATTERN_SIZE`); every `$ref` points
    inside the schema (`#...`, or a URI that resolves against the root `$id` to
    the root). Nothing is read from the network or the file system.

    Args:
        schema: a JSON Schema (dict or bool).
        cache_size: the most recognizer states kept per context.
        max_states: interned states kept before the transition memo is reset.
        validate: accepted for genlm-control 0.4.1 code (`validate=False` skipped its
            metaschema check); the schema is always checked here, since compiling it
            needs a valid schema.
        spelling: "any" (default), "compact" or "canonical", as above. Part of the
            constraint's identity: the engine path serves the same spelling.

    Raises:
        ValueError: for an invalid schema (`InvalidSchemaError`, which is also the
            `jsonschema.exceptions.SchemaError` 0.4.1 raised), an unsupported
            keyword, a non-local `$ref`, a limit exceeded (named), a non-finite
            number, a schema no document satisfies, or an unknown `spelling`.
        TypeError: for a schema that is not JSON data (a non-`str` key, a tuple, ...).
    """

    stateful = True

    def __init__(self, schema: Any, cache_size: int = 16384, max_states: int = 200_000,
                 validate: bool = True, *, spelling: Spelling = DEFAULT_SPELLING):
        self.spelling = check_spelling(spelling)
        self.schema = schema
        self.cache_size = cache_size
        self.max_states = max_states
        compiled = compile_schema(schema)
        self.root = compiled.root
        self.superset_keywords = compiled.inexact
        self.document_check = DocumentCheck(schema) if compiled.inexact else None
        super().__init__(BYTE_VOCAB)
        self._init_cache()

    _CACHES = ("_cache", "transitions")

    def _init_cache(self) -> None:
        self.transitions = Transitions(initial_state(self.root, self.spelling), self.max_states)
        self._cache: PrefixStateCache = PrefixStateCache(
            self.transitions.root, self._step, self.cache_size
        )

    def _step(self, state, byte):
        return self.transitions.next_state(state, byte)

    def state(self, context: Sequence[int]):
        """The recognizer state after `context` (None: no valid document starts so)."""
        check_byte_context(context)
        if self.transitions.full():
            self.transitions.reset()
        return self._cache.get(context)

    async def prefix(self, context: Sequence[int]) -> float:
        return 0.0 if self.state(context) is not None else NEG_INF

    async def complete(self, context: Sequence[int]) -> float:
        s = self.state(context)
        ok = s is not None and self.transitions.accepts(s) and self.document_ok(context)
        return 0.0 if ok else NEG_INF

    def document_ok(self, data: Sequence[int]) -> bool:
        """The whole-document check (True where the recognizer alone is exact)."""
        return self.document_check is None or self.document_check(bytes(data))

    def _row(self, context) -> np.ndarray:
        s = self.state(context)
        if s is None:
            raise ValueError(f"context {list(context)!r} has weight zero under {self!r}")
        return self._checked(self._state_row(s), context)

    def _checked(self, row: np.ndarray, data: Sequence[int]) -> np.ndarray:
        """`row` with EOS at -inf where the document fails the whole-document check."""
        if row[-1] == 0.0 and not self.document_ok(data):
            row = row.copy()
            row[-1] = NEG_INF
        return row

    def _state_row(self, s) -> np.ndarray:
        t = self.transitions
        row = np.full(len(BYTE_VOCAB) + 1, NEG_INF)
        row[:-1][t.byte_row(t.sid(s)) >= 0] = 0.0
        row[-1] = 0.0 if t.accepts(s) else NEG_INF
        return row

    async def logw_next(self, context: Sequence[int]) -> LazyWeights:
        """0 for each byte that keeps a valid document reachable, and for EOS when
        the context is one; -inf elsewhere."""
        return self.make_lazy_weights(self._row(context))

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not contexts:
            return []
        return self.rows_to_weights(np.stack([self._row(c) for c in contexts]))

    # Carried states (see `Potential.state_of`): the recognizer's frame stacks ----

    def state_of(self, context: Sequence[int]):
        """The recognizer state after `context` (None: no valid document starts so);
        a `DocState` (with the bytes) where whole documents are checked."""
        s = self.state(context)
        if s is None or self.document_check is None:
            return s
        return DocState(s, bytes(context))

    def advance(self, state, token: int):
        """The state after one more byte (memoized per interned recognizer state)."""
        check_byte_context((token,))
        if state is None:
            return None
        if self.transitions.full():
            self.transitions.reset()
        if isinstance(state, DocState):
            nxt = self.transitions.next_state(state.machine, token)
            return None if nxt is None else DocState(nxt, state.data + bytes((token,)))
        return self.transitions.next_state(state, token)

    def logw_next_of(self, state) -> np.ndarray:
        """0 for each byte that keeps a valid document reachable from `state`, and for
        EOS when `state` accepts; -inf elsewhere."""
        if state is None:
            raise ValueError(f"a dead state has no next-token weights under {self!r}")
        if isinstance(state, DocState):
            return self._checked(self._state_row(state.machine), state.data)
        return self._state_row(state)

    def engine_source(self) -> EngineSource:
        """The schema; engine/ decides where the engine's language may differ from this
        class's (a whitelist of shapes, see docs/constraint-engines.md).
        `coerce(..., engine=True)` takes the engine even where it differs (properties
        in declaration order, no `\\/` escape, ...)."""
        return EngineSource("json_schema", self.schema, spelling=self.spelling)

    def length_hint(self) -> str:
        """What shortens this schema's documents (for the zero-weight warning)."""
        from genlm.control._length_hints import json_hint

        return json_hint(self.spelling)

    def generic_coercion(self, other, f, prune, homomorphic, trie) -> Coerced:
        """Through a homomorphic `f`, `CoercedJson`, whose `logw_next` reads a
        per-state token row computed by one trie walk; otherwise `Coerced`."""
        join = is_join(f) if homomorphic is None else homomorphic
        if join:
            return CoercedJson(self, other, f, prune=prune, homomorphic=True, trie=trie)
        return super().generic_coercion(other, f, prune, homomorphic, trie)

    def __repr__(self) -> str:
        extra = "" if self.spelling == DEFAULT_SPELLING else f", spelling={self.spelling!r}"
        return f"JsonSchema({_short(self.schema)}{extra})"


def _short(schema: Any) -> str:
    text = repr(schema)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["JsonSchema"]
