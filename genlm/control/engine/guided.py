"""`GuidedConstraint`: a Boolean constraint over an LLM's token ids, served by a compiled
token-mask engine (llguidance) in microseconds.

See docs/constraint-engines.md for the measurements behind the engine choice and
for each place where the engine's language differs from the generic potentials'.
"""

from __future__ import annotations

import asyncio
import logging
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._device import is_tensor
from genlm.control._lru import LRU
from genlm.control._state_cache import PrefixStateCache
from genlm.control.constraints.recognizer import CachedRecognizer
from genlm.control.constraints.regex.syntax import parse_regex
from genlm.control.engine._guided_engine import (
    KINDS,
    TokenVocabulary,
    compile_grammar,
    engine_vocab,
    fill_masks,
    mask_allowed,
    mask_rows,
    new_matcher,
)
from genlm.control.engine._guided_regex import emit
from genlm.control.horizon import tokens_left
from genlm.control.potential import fast_paths
from genlm.control.potential.base import Potential
from genlm.control.potential.coerce import Coerced
from genlm.control.weights import NEG_INF, LazyWeights

logger = logging.getLogger(__name__)


def _token_maps(llm: Any) -> Any:
    """The token vocabulary of `llm` (a `PromptedLLM`'s `token_maps`), or `llm` itself
    when it is one (`TokenVocabulary`: the engine reads a model's tokens, never its module)."""
    maps = getattr(llm, "token_maps", llm)
    if not isinstance(maps, TokenVocabulary):
        raise TypeError(
            f"a guided constraint needs a PromptedLLM (or its TokenMaps), got {type(llm).__name__}"
        )
    return maps


_FEW = 8  # up to this many tokens, `allowed_next` asks the matcher token by token


def _step(matcher: Any, token_id: int) -> Any | None:
    """The matcher after one more token (a copy; cached matchers are never mutated).

    A refused token is found by `validate_tokens` (≈1 µs) without a copy: consuming
    it would put the copy in the error state, which costs ≈300 µs.
    """
    if not matcher.validate_tokens([token_id]):
        return None
    nxt = matcher.deep_copy()
    return nxt if nxt.consume_token(token_id) else None


#: `batch_allowed` unpacks tensor blocks of at least this many entries on a worker
#: thread. NumPy blocks are unpacked on the loop's thread: run by run that costs about
#: 1 ms at 10 x 131k, less than the thread's hand-off (`benchmarks/mask_overlap.py`).
OFF_THREAD = 1 << 20
#: Whether NumPy blocks go to the worker thread too (off: see above; the benchmark
#: turns it on to measure the hand-off).
HOST_OFF_THREAD = False


class GuidedConstraint(CachedRecognizer):
    """A Boolean constraint over a `PromptedLLM`'s vocabulary from a compiled grammar.

    With `m(ctx)` the engine's matcher after the context's token ids (None when a
    token was refused):

        prefix(ctx)   = 0 iff m(ctx) is not None, else -inf
        complete(ctx) = 0 iff m(ctx) is not None and accepts, else -inf
        logw_next(ctx)[x] = 0 iff x is in m(ctx)'s token mask; [EOS] = complete(ctx)

    The token mask holds exactly the tokens whose bytes keep the text a prefix of
    the language, so `logw_next(ctx)[x] = prefix(ctx + [x]) - prefix(ctx)`. The
    vocabulary (and its tables) is the LLM's, so the constraint multiplies with it
    (`llm * c`), serves as AWRS `condition` or as a critic. Matchers are cached per
    context (LRU, `cache_size`) and advanced by copying the parent's matcher and
    consuming one token, so a step of SMC costs one copy, one token and one mask.

    Build one with `from_regex`, `from_lark`, `from_json_schema`, `llm.constrain(...)`,
    or implicitly by coercing `BoolFSA.from_regex`, `BoolCFG.from_lark` or
    `JsonSchema` onto the LLM.

    Args:
        llm: a `PromptedLLM` (or its `TokenMaps`).
        kind: "regex" (engine syntax), "lark" or "json_schema".
        source: the pattern, grammar text or schema.
        cache_size: the most matcher states kept.

    Raises:
        ValueError: carrying the engine's message, for input the engine rejects.
    """

    cheap_logw_next = True  # one engine mask per distinct state

    def __init__(self, llm: Any, kind: str, source: Any, *, cache_size: int = 4096):
        maps = _token_maps(llm)
        if kind not in KINDS:
            raise ValueError(f"unknown grammar kind {kind!r}: choose one of {list(KINDS)}")
        self.kind, self.source, self.cache_size = kind, source, cache_size
        self.token_maps = maps
        self.engine = engine_vocab(maps)
        self.grammar = compile_grammar(self.engine, kind, source)
        self._ids = self.engine.vocab_ids.tolist()
        super().__init__(tables=maps.tables)
        self._init_cache()

    def _init_cache(self) -> None:
        # The compiled grammar (and the lexer states the engine builds lazily) is
        # shared by copies of one root matcher: a spawned copy or a cleared cache
        # starts from a copy of it instead of compiling the grammar again.
        root = self.__dict__.get("_root")
        if root is None:
            root = self._root = new_matcher(self.engine, self.grammar)
        self._cache: PrefixStateCache = PrefixStateCache(root.deep_copy(), _step, self.cache_size)

    def clear_cache(self) -> None:
        """Drop every cached state, and the engine's lexer states with the compiled
        grammar (compiled again here; `spawn` keeps them)."""
        self.__dict__.pop("_root", None)
        self._init_cache()

    # Constructors -------------------------------------------------------------

    @classmethod
    def from_regex(cls, llm: Any, pattern: str, **kwargs) -> "GuidedConstraint":
        """Token sequences whose bytes fully match `pattern`.

        The pattern means what it means to `BoolFSA.from_regex` (`re.fullmatch`
        with ASCII classes, flags resolved) and is printed exactly in the engine's
        syntax (see `_guided_regex`), so one pattern has one language on every path.

        Raises:
            TypeError: `pattern` is not a str.
            ValueError: a pattern `BoolFSA.from_regex` refuses (invalid syntax, an
                anchor inside the pattern, a lookaround, ...), with its reason.
        """
        return cls(llm, "regex", emit(parse_regex(pattern)), **kwargs)

    @classmethod
    def from_lark(cls, llm: Any, grammar: str, **kwargs) -> "GuidedConstraint":
        """Token sequences whose bytes the Lark grammar derives from `start`, with the
        engine's lexer (longest match per terminal; see the docs for the differences
        from `BoolCFG.from_lark`)."""
        return cls(llm, "lark", grammar, **kwargs)

    @classmethod
    def from_json_schema(cls, llm: Any, schema: Any, spelling: str = "any",
                         **kwargs) -> "GuidedConstraint":
        """Token sequences whose bytes are a JSON document valid under `schema`, as the
        engine writes them (properties in declaration order; see the docs). The schema
        is checked as `JsonSchema` checks it first (JSON data, size limits, local `$ref`s).

        `spelling` ("canonical", "compact" or "any"; `JsonSchema`'s option) sets the
        engine's JSON options nearest it (`spelling_options`): no whitespace outside
        strings unless "any", and for "canonical" no `\\uXXXX` escape of a printable
        character. The schema's own `x-guidance` options, where given, win.

        Raises:
            ValueError: an unknown spelling, or a schema `JsonSchema` refuses.
        """
        from genlm.control.constraints.json_schema import check_document, check_spelling
        from genlm.control.engine._guided_engine import with_spelling

        schema = with_spelling(schema, check_spelling(spelling))
        if not isinstance(schema, str):
            check_document(schema)
        return cls(llm, "json_schema", schema, **kwargs)

    def length_hint(self) -> str:
        """What shortens this constraint's texts (for the zero-weight warning)."""
        from genlm.control._length_hints import json_hint, lark_hint, regex_hint

        if self.kind == "json_schema":
            opts = self.source.get("x-guidance", {}) if isinstance(self.source, dict) else {}
            spelling = "any" if opts.get("whitespace_flexible") is not False else (
                "canonical" if opts.get("json_allow_general_unicode_escapes") is False else "compact")
            return json_hint(spelling, "llm.constrain(json_schema=...)")
        return lark_hint(self.source) if self.kind == "lark" else regex_hint()

    # States -------------------------------------------------------------------

    def matcher(self, context: Sequence[Any]) -> Any | None:
        """The engine's matcher after `context` (None: a token was refused). Shared
        with the cache: do not mutate it (use `deep_copy()`)."""
        return self._cache.get(self.token_maps.context_ids(context))

    def _live(self, contexts: Sequence[Sequence[Any]]) -> list:
        states = [self.matcher(c) for c in contexts]
        for s, c in zip(states, contexts):
            if s is None:
                raise ValueError(f"context {list(c)!r} has weight zero under {self!r}")
        return states

    async def prefix(self, context: Sequence[Any]) -> float:
        """0 iff every token is allowed where it stands. The last token is checked on
        the parent's matcher without advancing a copy: AWRS asks this of every token
        it draws, most of which are never extended."""
        ids = self.token_maps.context_ids(context)
        if not ids:
            return 0.0
        parent = self._cache.get(ids[:-1])
        return 0.0 if parent is not None and parent.validate_tokens(ids[-1:]) else NEG_INF

    async def complete(self, context: Sequence[Any]) -> float:
        m = self.matcher(context)
        return 0.0 if m is not None and m.is_accepting() else NEG_INF

    async def allowed_next(self, context: Sequence[Any], indices: Sequence[int]) -> Sequence[bool]:
        """Which of the tokens at `indices` of `vocab_eos` may follow `context`, in one
        call: `prefix(context + [x]) > -inf` for a token `x`, `complete(context) > -inf`
        for EOS (AWRS checks its draws this way).

        A few tokens are checked one by one on the matcher (≈0.4 µs each; a list of
        bools), more against its token mask (a bool array).
        """
        m = self.matcher(context)
        if m is None:
            return [False] * len(indices)
        eos = len(self.vocab)
        if len(indices) <= _FEW:
            ids = self._ids
            return [
                m.is_accepting() if i == eos else m.validate_tokens([ids[i]]) == 1 for i in indices
            ]
        rows = np.asarray(indices, dtype=np.intp)
        ids = self.engine.vocab_ids[np.minimum(rows, eos - 1)]
        words = fill_masks(self.engine, [m])[0].view(np.uint32)
        ok = (words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1 == 1
        ok[rows == eos] = m.is_accepting()
        return ok

    # Masks --------------------------------------------------------------------

    def _packed(self, contexts: Sequence[Sequence[Any]]) -> tuple:
        """Packed masks and accepting flags of the distinct states, and each context's slot."""
        states = self._live(contexts)
        slot: dict[int, int] = {}
        inverse = np.array([slot.setdefault(id(s), len(slot)) for s in states], dtype=np.intp)
        distinct = list({id(s): s for s in states}.values())
        masks = fill_masks(self.engine, distinct)
        accepting = np.array([s.is_accepting() for s in distinct], dtype=bool)
        return masks[inverse], accepting[inverse]

    def rows(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray:
        """`logw_next` rows of the contexts: one engine mask per distinct state.

        Raises:
            ValueError: a context with weight zero.
        """
        return mask_rows(self.engine, *self._packed(contexts))

    async def batch_allowed(self, contexts: Sequence[Sequence[Any]], like: Any = None) -> Any:
        """Where each context's `logw_next` row is 0, as a bool block over `vocab_eos`:
        on the device of `like` when it is a torch tensor (the packed masks are
        unpacked there), else a NumPy block.

        The masks are filled here; unpacking a large tensor block (`OFF_THREAD`
        entries or more) runs on a worker thread (torch releases the interpreter lock
        there), so it overlaps a forward the event loop runs meanwhile; a NumPy block
        is unpacked here (measured faster than the hand-off). The matchers are never
        touched off this thread: the engine refuses a matcher that two threads borrow
        at once.

        Raises:
            ValueError: a context with weight zero.
        """
        masks, accepting = self._packed(contexts)
        return await self.unpacked(masks, accepting, like)

    async def unpacked(self, masks: np.ndarray, accepting: np.ndarray, like: Any = None) -> Any:
        """Packed masks (one `n_words` int32 row each) and accepting flags as the bool
        block `batch_allowed` gives, on the device of `like` when it is a tensor."""
        if len(masks) * len(self._ids) < OFF_THREAD or not (is_tensor(like) or HOST_OFF_THREAD):
            return mask_allowed(self.engine, masks, accepting, like)
        return await asyncio.to_thread(mask_allowed, self.engine, masks, accepting, like)

    async def logw_next(self, context: Sequence[Any]) -> LazyWeights:
        """0 for every token in the engine's mask, and for EOS where the matcher accepts."""
        return self.make_lazy_weights(self.rows([context])[0])

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        if not contexts:
            return []
        return self.rows_to_weights(self.rows(contexts))

    # Copies -------------------------------------------------------------------

    def __getstate__(self) -> dict:
        """Engine objects do not pickle: keep the sources, rebuild them on load."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("engine", "grammar", "_cache", "_ids", "_root")
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.engine = engine_vocab(self.token_maps)
        self.grammar = compile_grammar(self.engine, self.kind, self.source)
        self._ids = self.engine.vocab_ids.tolist()
        self._init_cache()

    def __repr__(self) -> str:
        text = repr(self.source)
        text = text if len(text) <= 50 else text[:47] + "..."
        return f"GuidedConstraint({self.kind}={text}, |V|={len(self.vocab)})"


class GuidedCoerced(Coerced):
    """`potential.coerce(llm, f=b"".join)` served by a `GuidedConstraint`.

    A `Coerced` (its `potential` and `f` are the byte-level constraint and the join)
    whose values all come from the compiled engine over the LLM's whole vocabulary,
    so no symbol trie is built (`walk=False`). It forwards the engine's fast paths:
    `cheap_logw_next`, `allowed_next` and `batch_allowed`.

    Args:
        potential: the byte-level constraint that was coerced.
        f: the context map (`b"".join`).
        guided: the engine-backed constraint over the LLM's vocabulary.
        exact: whether the engine's language is the constraint's (`Exactness.EXACT`);
            only then are the engine's masks kept per state of the constraint's own
            coercion (`batch_allowed`).
    """

    def __init__(self, potential: Potential, f: Any, guided: GuidedConstraint, exact: bool = False):
        self.guided = guided
        self.exact = exact
        super().__init__(potential, guided, f, prune=True, homomorphic=True, walk=False)

    @property
    def cheap_logw_next(self) -> bool:  # type: ignore[override]
        return self.guided.cheap_logw_next

    async def prefix(self, context):
        return await self.guided.prefix(context)

    async def complete(self, context):
        return await self.guided.complete(context)

    async def batch_prefix(self, contexts):
        return await self.guided.batch_prefix(contexts)

    async def batch_complete(self, contexts):
        return await self.guided.batch_complete(contexts)

    async def allowed_next(self, context, indices) -> Sequence[bool]:
        """`GuidedConstraint.allowed_next` of the engine behind this coercion."""
        return await self.guided.allowed_next(context, indices)

    async def logw_next(self, context) -> LazyWeights:
        return await self.guided.logw_next(context)

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        return await self.guided.batch_logw_next(contexts)

    async def batch_allowed(self, contexts, like: Any = None) -> Any:
        """`GuidedConstraint.batch_allowed` of the engine behind this coercion.

        Where the engine's language is the constraint's (`exact`), once the
        constraint's own coercion with per-state rows is built (the token budget's
        twin: a regex's deterministic byte automaton, a schema's recognizer), the
        engine's mask is filled once per state of it and kept (`_state_masks`): a
        context whose state has a kept mask costs no engine matcher and no fill. The
        engine's mask after a context is the tokens whose bytes keep the text a
        prefix of its language, and whether it accepts; with one language on both
        paths, both depend only on the continuations left after the context's bytes,
        which the twin's state fixes (its own rows are kept per state)."""
        states = self._twin_states(contexts)
        if states is None:
            return await self.guided.batch_allowed(contexts, like)
        kept = self._state_masks
        found = {q: kept.get(q) for q in dict.fromkeys(states)}
        new = {q: c for q, c in zip(states, contexts) if found[q] is None}
        if new:
            masks, accepting = self.guided._packed(list(new.values()))
            for q, mask, accepts in zip(new, masks, accepting):
                found[q] = (mask, bool(accepts))
                kept.put(q, found[q])
        masks = np.stack([found[q][0] for q in states])
        accepting = np.array([found[q][1] for q in states], dtype=bool)
        return await self.guided.unpacked(masks, accepting, like)

    #: The most twin states whose engine masks `batch_allowed` keeps (a packed mask
    #: is one bit per token: 16 KB at 131k tokens); 0 keeps none.
    state_masks_kept = 1024

    @cached_property
    def _state_masks(self) -> LRU:
        """Twin state -> (packed engine mask, accepting), see `batch_allowed`."""
        return LRU(self.state_masks_kept)

    def _twin_states(self, contexts: Sequence[Sequence[Any]]) -> list | None:
        """The twin's state after each context, where the engine's masks are kept per
        state (see `batch_allowed`); None otherwise: the engine's language not the
        constraint's, no masks kept, the twin not built (it is never built for this)
        or without per-state rows, or a context the twin finds dead (the engine
        answers it as it always does)."""
        if not self.exact or not self.state_masks_kept:
            return None
        twin = self.__dict__.get("_twin")
        row_state = getattr(twin, "row_state", None)  # a coercion with per-state rows
        if row_state is None or not twin.boolean_rows:
            return None
        states = [row_state(c) for c in contexts]
        return None if any(q is None for q in states) else states

    # Tokens left to a complete document (`fast_paths.TokensToFinish`) -------------

    @property
    def batch_tokens_to_finish(self) -> Any:  # type: ignore[override]
        """The bound of the constraint's own generic coercion onto the same vocabulary
        (its "twin", built on first use): exact for a deterministic byte automaton (a
        regex), a lower bound for a grammar or a schema; None where the constraint's
        generic coercion offers none."""
        twin = self._budget_twin()
        return None if twin is None else self._tokens_to_finish

    def _budget_twin(self) -> Any:
        """The generic coercion whose bound this one reads, or None (no bound): of
        the constraint's `regular_form` where it has one (a regular Lark grammar as a
        byte automaton of the same language, whose bound is exact), else of the
        constraint itself.

        The engine's language is the constraint's (the default) or a subset of it
        (`engine=True`: docs/constraint-engines.md), so every completion the engine
        allows the twin allows too, and the twin's fewest tokens to a complete document
        never exceeds the engine's: the twin's lower bound is one here as well."""
        twin = self.__dict__.get("_twin", False)
        if twin is False:
            regular = getattr(self.potential, "regular_form", None)
            source = (regular() if callable(regular) else None) or self.potential
            try:
                twin = source.generic_coercion(self.guided, self.f, False, True, None)
            except ValueError as e:  # e.g. a grammar too large for the Earley parser
                logger.debug("the engine coercion prunes nothing by the budget: %s", e)
                twin = None
            if twin is not None and fast_paths.tokens_to_finish(twin) is None:
                twin = None
            classes = getattr(twin, "_class_trie", None)
            if classes is not None and len(classes()[0]) > self.budget_max_nodes:
                logger.debug(
                    "the engine coercion prunes nothing by the budget: the grammar's walk is too large"
                )
                twin = None
            self._twin = twin
        return twin

    #: For a grammar, contexts further than this many tokens from the horizon are not
    #: asked of the twin (its counts there rarely bind, and cost an Earley chart per
    #: step); an automaton's and a schema's counts are read everywhere.
    budget_within = 1
    #: A grammar's bound is offered only where its walk (`CoercedCFG._class_trie`) has
    #: at most this many nodes: each costs an Earley column and a distance table.
    budget_max_nodes = 256

    async def _tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray:
        """The twin's counts (for a grammar within `budget_within` tokens of the
        horizon, 0 elsewhere: prune nothing); a context the twin finds dead (possible only where the
        engine's language is not a subset of the twin's) prunes nothing."""
        twin = self._budget_twin()
        near = self._near(twin, contexts)
        if not near:
            return np.zeros((len(contexts), len(self.vocab_eos)))
        # the twin's block is read, not written (it may be one the twin keeps): with
        # every context near and none dead it is the answer as it is, else one copy
        got = np.asarray(await fast_paths.tokens_to_finish(twin)([contexts[k] for k in near]), dtype=np.float64)
        dead = ~(got < np.inf).any(axis=1)
        if len(near) == len(contexts):
            return np.where(dead[:, None], 0.0, got) if dead.any() else got
        rows = np.zeros((len(contexts), len(self.vocab_eos)))
        rows[near] = got
        rows[np.asarray(near)[dead]] = 0.0
        return rows

    def _near(self, twin: Any, contexts: Sequence[Sequence[Any]]) -> list[int]:
        """The indices of the contexts whose twin counts are read: every context for an
        automaton or a schema, those within `budget_within` tokens of the horizon for
        a grammar."""
        far = self.budget_within if hasattr(twin, "_class_trie") else float("inf")
        return [k for k, c in enumerate(contexts) if (tokens_left(c) or 0) <= far]

    @property
    def batch_most_tokens_to_finish(self) -> Any:  # type: ignore[override]
        """The twin's largest bounds, where the twin offers them (`MostTokensToFinish`;
        the twin's bound is `inf` only where its row, and so the engine's, is `-inf`)."""
        twin = self._budget_twin()
        if twin is None or fast_paths.most_tokens_to_finish(twin) is None:
            return None
        return self._most_tokens_to_finish

    async def _most_tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray:
        """The twin's largest bound per context (0 where `_tokens_to_finish` reads 0:
        far from the horizon, or dead under the twin)."""
        twin = self._budget_twin()
        out = np.zeros(len(contexts))
        near = self._near(twin, contexts)
        if near:
            got = np.asarray(await fast_paths.most_tokens_to_finish(twin)([contexts[k] for k in near]), dtype=np.float64)
            out[near] = np.maximum(got, 0.0)
        return out

    def matcher(self, context: Sequence[Any]) -> Any | None:
        """The engine's matcher after `context` (see `GuidedConstraint.matcher`)."""
        return self.guided.matcher(context)

    def spawn(self) -> "GuidedCoerced":
        return GuidedCoerced(self.potential.spawn(), self.f, self.guided.spawn(), self.exact)

    def cleanup(self) -> Cleaned:
        return cleaned(self.guided.cleanup())

    def __repr__(self) -> str:
        return f"Coerced({self.guided!r})"


__all__ = ["GuidedConstraint"]
