"""The `Potential` base class: a non-negative weight on token sequences."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._returns import check_returns
from genlm.control.constant import EOS, EndOfSequence
from genlm.control.potential.tables import VocabTables, build_tables
from genlm.control.typing import TokenType
from genlm.control.weights import NEG_INF, LazyWeights, LazyWeightsBatch
from genlm.control.window import gather_eager, gather_or_cancel

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.potential.autobatch import AutoBatchedPotential
    from genlm.control.potential.coerce import Coerced
    from genlm.control.potential.multi_proc import MultiProcPotential
    from genlm.control.potential.product import Product
    from genlm.control.potential.reweight import Normalized, Tempered


class SparseLogws(NamedTuple):
    """The live entries of a `logw_next` row: indices into `vocab_eos` and their log weights."""

    indices: np.ndarray
    logws: np.ndarray


def _nonempty(contexts: Sequence[list], method: str) -> None:
    if len(contexts) == 0:
        raise ValueError(f"{method} needs a non-empty list of contexts")


class Potential(ABC):
    """A potential: log weights of token sequences, as prefixes and as complete sequences.

    Subclasses implement `complete` and `prefix`; `logw_next` and the batch methods
    have defaults derived from them:

        logw_next(ctx)[x] = prefix(ctx + [x]) - prefix(ctx)
        logw_next(ctx)[EOS] = complete(ctx) - prefix(ctx)

    What a subclass defined outside genlm-control returns from these methods is
    checked at each call (see `genlm.control._returns`): None, a coroutine,
    a dict or a row of the wrong length is a `TypeError` naming the class and method.

    Args:
        vocabulary: the tokens (without EOS).
        token_type: optional; inferred from `vocabulary` when omitted.
        eos: the end marker (`EOS` by default).
        tables: tables from `Potential.build_tables`; when given, `vocabulary`,
            `token_type` and `eos` are taken from them and no O(V) work is done.

    Raises:
        TypeError: `tables` that are not `VocabTables`.
    """

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        check_returns(cls)

    def __init__(
        self,
        vocabulary: Sequence[Any] | None = None,
        token_type: TokenType | None = None,
        eos: EndOfSequence | None = None,
        tables: VocabTables | None = None,
    ):
        if tables is None:
            if vocabulary is None:
                raise ValueError("a potential needs a vocabulary or tables")
            tables = build_tables(vocabulary, token_type, eos)
        elif not isinstance(tables, VocabTables):
            raise TypeError(
                f"tables must be VocabTables (from Potential.build_tables or another "
                f"potential's .tables), got {type(tables).__name__}"
            )
        self._tables = tables

    @property
    def tables(self) -> VocabTables:
        """The vocabulary's index tables, shared with every wrapper (read-only)."""
        return self._tables

    @tables.setter
    def tables(self, value: Any) -> None:
        raise AttributeError(
            f"{type(self).__name__}.tables is read-only: pass the vocabulary, or tables=... "
            "from Potential.build_tables, to super().__init__ instead of assigning self.tables"
        )

    # Vocabulary views -------------------------------------------------------

    @staticmethod
    def build_tables(
        vocabulary: Sequence[Any],
        token_type: TokenType | None = None,
        eos: EndOfSequence | None = None,
    ) -> VocabTables:
        """Validate `vocabulary` and build its index tables once, for sharing."""
        return build_tables(vocabulary, token_type, eos)

    @property
    def vocab(self) -> list:
        """The tokens, without EOS (shared: do not mutate)."""
        return self.tables.vocab

    @property
    def vocab_eos(self) -> list:
        """`vocab + [eos]`, the index order of every weight row (shared: do not mutate)."""
        return self.tables.vocab_eos

    @property
    def eos(self) -> EndOfSequence:
        return self.tables.eos

    @property
    def token_type(self) -> TokenType:
        return self.tables.token_type

    @property
    def lookup(self) -> dict:
        return self.tables.lookup

    # The three methods ------------------------------------------------------

    @abstractmethod
    async def complete(self, context: list) -> float:
        """Log weight of `context` as a finished sequence."""

    @abstractmethod
    async def prefix(self, context: list) -> float:
        """Log weight of `context` as a prefix."""

    async def score(self, context: list) -> float:
        """`complete(ctx[:-1])` if `ctx` ends in EOS, else `prefix(ctx)`."""
        if context and context[-1] == self.eos:
            return await self.complete(list(context[:-1]))
        return await self.prefix(context)

    async def logw_next(self, context: list) -> LazyWeights:
        """Log weights of each next token (and EOS) given `context`.

        Raises:
            ValueError: if `prefix(context)` is `-inf` (the context has no weight).
        """
        ctx_logw = await self.prefix(context)
        if ctx_logw == NEG_INF:
            # "Context ... `prefix`": 0.4.1's wording, which code written for it may match
            raise ValueError(f"Context {context!r} has weight zero under `prefix` of {self!r}")
        vocab = self.tables.vocab
        if type(self).batch_prefix is Potential.batch_prefix:
            # one `prefix` per extension, each built as it is scored: V lists alive at
            # once would trigger full garbage collections (3x the row's cost)
            scored = gather_eager(self.prefix([*context, x]) for x in vocab)
        else:
            scored = self.batch_prefix([[*context, x] for x in vocab])
        prefixes, complete = await gather_or_cancel(scored, self.complete(context))
        logws = np.append(np.asarray(prefixes, dtype=np.float64), complete) - ctx_logw
        return self.make_lazy_weights(logws)

    async def sparse_logw_next(self, context: list) -> SparseLogws | None:
        """The live entries of `logw_next(context)`, or None when not known to be sparse."""
        return None

    def is_terminal_only(self) -> bool:
        """Whether `prefix(ctx) == 0` for every context, so that the potential weighs only
        finished sequences; `SMC` then applies such a critic once, at termination.
        False unless a subclass that keeps this invariant overrides it."""
        return False

    # Fast paths (declared, see `genlm.control.potential.fast_paths`) ---------

    #: Whether `logw_next` and `batch_logw_next` cost about what one `prefix` call
    #: does (a compiled token mask, a cached per-state row). A sampler may then read
    #: a condition's whole row instead of checking tokens one by one: AWRS draws
    #: exactly from `potential * condition` with such a condition.
    cheap_logw_next: bool = False

    #: `async allowed_next(context, indices)`: which tokens at `indices` of `vocab_eos`
    #: may follow `context`, in one call (`fast_paths.AllowedNext`). None: not offered;
    #: a subclass offers it by defining the method.
    allowed_next: Any = None

    #: `async batch_allowed(contexts, like=None)`: a bool block over `vocab_eos`, True
    #: where each `logw_next` row is finite (`fast_paths.BatchAllowed`). None: not offered.
    batch_allowed: Any = None

    #: A `fast_paths.TokenTrie`: this potential's tokens as the paths of a symbol trie
    #: into an inner potential (a coercion through a homomorphic map). None: not offered.
    token_trie: Any = None
    #: `async batch_eos_entries(contexts)`: each context's `logw_next` EOS entry, without
    #: its row (`fast_paths.EosEntries`). None: not offered.
    batch_eos_entries: Any = None

    #: `async batch_tokens_to_finish(contexts)`: per next token, a lower bound on the
    #: tokens still needed to end (`fast_paths.TokensToFinish`). None: not offered.
    batch_tokens_to_finish: Any = None
    #: `async batch_most_tokens_to_finish(contexts)`: each context's largest finite
    #: bound of that row (`fast_paths.MostTokensToFinish`). None: not offered.
    batch_most_tokens_to_finish: Any = None
    #: `compiled_coercion(constraint, f, engine, form)`: this potential, as a coercion
    #: target, serves a byte-level constraint with a compiled token-mask engine
    #: (`fast_paths.CompiledCoercion`; a language model offers it). None: not offered.
    compiled_coercion: Any = None

    def rows_class(self) -> type:
        """The class whose methods compute this potential's `logw_next` rows: its own
        (a view that only batches calls names its inner potential's)."""
        return type(self)

    #: The symbols that can occur in a context of positive weight (None: any token of
    #: the vocabulary). `coerce(..., prune=True)` drops the target tokens that map onto
    #: a symbol outside it, which have weight zero anyway: a grammar's coercion onto an
    #: LM keeps only the tokens spelled in the grammar's terminal bytes.
    alphabet: frozenset | None = None

    # Carried state (optional, synchronous fast path for samplers) -----------

    #: Whether `state_of`, `advance` and `logw_next_of` are implemented.
    stateful: bool = False

    def state_of(self, context: list) -> Any:
        """The state after reading `context`; None when `prefix(context) = -inf`.

        A potential with `stateful = True` carries what it knows about a context in
        a state, so a caller walking many extensions of one context (a trie of
        tokens) pays for the context once:

            logw_next_of(advance(state_of(ctx), x)) == logw_next(ctx + [x]).weights
            advance(state_of(ctx), x) is None  iff  prefix(ctx + [x]) = -inf

        States are opaque, immutable values that stay valid after the potential's
        caches are cleared. These methods are synchronous; the async API stays the
        public one.

        Raises:
            NotImplementedError: unless the potential is `stateful`.
        """
        raise NotImplementedError(f"{type(self).__name__} does not carry states")

    def advance(self, state: Any, token: Any) -> Any:
        """The state after one more `token` (None, the dead state, stays None)."""
        raise NotImplementedError(f"{type(self).__name__} does not carry states")

    def logw_next_of(self, state: Any) -> np.ndarray:
        """The `logw_next` row over `vocab_eos` after the context that led to `state`.

        Raises:
            ValueError: for a dead state (None), as `logw_next` does for a context
                of weight zero.
        """
        raise NotImplementedError(f"{type(self).__name__} does not carry states")

    # Batches ---------------------------------------------------------------

    async def batch_complete(self, contexts: Sequence[list]) -> np.ndarray:
        """`complete` of each context.

        Raises:
            ValueError: no contexts (as in 0.4.1, for each `batch_*` default).
        """
        _nonempty(contexts, "batch_complete")
        return np.array(await gather_or_cancel(*(self.complete(c) for c in contexts)), dtype=np.float64)

    async def batch_prefix(self, contexts: Sequence[list]) -> np.ndarray:
        """`prefix` of each context (a `prefix` that never suspends runs without a task)."""
        _nonempty(contexts, "batch_prefix")
        return np.array(await gather_eager(self.prefix(c) for c in contexts), dtype=np.float64)

    async def batch_score(self, contexts: Sequence[list]) -> np.ndarray:
        """`score` of each context."""
        _nonempty(contexts, "batch_score")
        return np.array(await gather_or_cancel(*(self.score(c) for c in contexts)), dtype=np.float64)

    async def batch_logw_next(self, contexts: Sequence[list]) -> list[LazyWeights]:
        """`logw_next` of each context.

        A potential with `sparse_logw_next` is served by scattering the live entries
        of every context into one block from `alloc_rows`.
        """
        _nonempty(contexts, "batch_logw_next")
        sparse = await gather_or_cancel(*(self.sparse_logw_next(c) for c in contexts))
        if all(s is not None for s in sparse):
            block = self.alloc_rows(len(contexts))
            for row, s in zip(block, sparse):
                row[s.indices] = s.logws
            return self.rows_to_weights(block)
        return LazyWeightsBatch(await gather_or_cancel(*(self.logw_next(c) for c in contexts)))

    # Weights ---------------------------------------------------------------

    def make_lazy_weights(self, weights: Any, log: bool = True) -> LazyWeights:
        """Wrap an array over `vocab_eos` as `LazyWeights`; a 2-D block of rows (0.4.1's
        batched form) gives a `LazyWeightsBatch`, one `LazyWeights` per row."""
        t = self.tables
        if getattr(weights, "ndim", 1) == 2:
            return LazyWeightsBatch.of_block(weights, t.lookup, t.vocab_eos, log, t.fallback)
        return LazyWeights(weights, t.lookup, t.vocab_eos, log, t.fallback)

    def alloc_logws(self, default: float = NEG_INF) -> np.ndarray:
        """One row of log weights over `vocab_eos`, filled with `default`."""
        return np.full(len(self.tables.vocab_eos), default, dtype=np.float64)

    def alloc_rows(self, n: int) -> np.ndarray:
        """A block of `n` rows of `-inf` over `vocab_eos` (override to place it on a device)."""
        return np.full((n, len(self.tables.vocab_eos)), NEG_INF, dtype=np.float64)

    def rows_to_weights(self, block: np.ndarray) -> LazyWeightsBatch:
        """Wrap each row of a block as `LazyWeights` (rows share the block's memory); the
        list is also the batched `LazyWeights` of 0.4.1 (`.weights` is the block)."""
        t = self.tables
        return LazyWeightsBatch.of_block(block, t.lookup, t.vocab_eos, True, t.fallback)

    # Copies ---------------------------------------------------------------

    def spawn(self) -> "Potential":
        """An independent copy (for another process or a concurrent prompt)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement spawn(): "
            "Potential.spawn() must be implemented by subclasses."
        )

    def cleanup(self) -> Cleaned:
        """Release resources held by this potential (none by default). The result may
        be awaited, as 0.4.1's `await potential.cleanup()` does."""
        return cleaned()

    def __getstate__(self) -> dict:
        # The autobatched view holds per-event-loop state; a copy makes its own.
        state = self.__dict__.copy()
        state.pop("_autobatched", None)
        return state

    # Algebra ----------------------------------------------------------------

    def __mul__(self, other: "Potential") -> "Product":
        """`(p1 * p2).prefix(xs) = p1.prefix(xs) + p2.prefix(xs)`."""
        from genlm.control.potential.product import Product

        if not isinstance(other, Potential):
            return NotImplemented
        return Product(self, other)

    def __pow__(self, exponent: float) -> "Tempered":
        """`(p ** a).prefix(xs) = a · p.prefix(xs)`."""
        from genlm.control.potential.reweight import Tempered

        return Tempered(self, exponent)

    def normalize(self) -> "Normalized":
        """The locally normalized potential: each `logw_next` row sums to one."""
        from genlm.control.potential.reweight import Normalized

        return Normalized(self)

    def coerce(
        self,
        other: "Potential | Sequence[Any]",
        f: Callable[[list], Any],
        prune: bool = True,
        homomorphic: bool | None = None,
        trie: Any = None,
        *,
        engine: bool | None = None,
    ) -> "Coerced":
        """This potential seen over `other`'s vocabulary, a context mapped by `f`.

        `Coerced.prefix(xs) = self.prefix(f(xs))`. Which `Coerced` serves it is
        decided in one place, `genlm.control.potential.planner.compile_for`.

        Args:
            other: a potential (or a vocabulary) whose tokens the result takes.
            f: maps a list of `other`'s tokens to a list of this potential's tokens
                (e.g. `b"".join` from byte-string tokens to bytes).
            prune: drop tokens of `other` that map outside this vocabulary.
            homomorphic: declares that `f(xs + ys) == f(xs) + f(ys)`, which allows
                an incremental walk of a trie of the tokens; None detects `b"".join`
                and `"".join`.
            trie: a `Coerced.build_trie(vocab, f)` result to share.
            engine: for a constraint with a compiled-engine form (`engine_source`)
                coerced onto a `PromptedLLM` through `b"".join`: None takes the
                engine where its language is the constraint's; True requires it
                (ValueError where it cannot serve); False never takes it.
        """
        from genlm.control.potential.planner import compile_for

        return compile_for(
            self, other, f, prune=prune, homomorphic=homomorphic, trie=trie, engine=engine
        )

    #: What `coerce(..., engine=True)` needs, for its error message.
    engine_form: str = "a BoolFSA.from_regex, BoolCFG.from_lark or JsonSchema constraint"

    def engine_source(self) -> Any:
        """This constraint in the compiled engine's terms, an `EngineSource`, or None
        when it has no engine form (the default)."""
        return None

    def generic_coercion(
        self, other: Any, f: Callable[[list], Any], prune: bool, homomorphic: bool | None, trie: Any
    ) -> "Coerced":
        """The `Coerced` that serves `coerce` without the compiled engine."""
        from genlm.control.potential.coerce import Coerced

        return Coerced(self, other, f, prune=prune, homomorphic=homomorphic, trie=trie)

    def to_autobatched(self) -> "AutoBatchedPotential":
        """This potential with concurrent calls served in batches (memoized)."""
        from genlm.control.potential.autobatch import AutoBatchedPotential

        return AutoBatchedPotential.of(self)

    def to_multiprocess(self, num_workers: int = 2, spawn_args: tuple = ()) -> "MultiProcPotential":
        """This potential evaluated in `num_workers` processes, each with a `spawn()` copy."""
        from genlm.control.potential.multi_proc import MultiProcPotential

        return MultiProcPotential(self.spawn, spawn_args, num_workers=num_workers)

    # Checks (see genlm.control.testing) -------------------------------------

    async def assert_contract(
        self, contexts, batch_contexts=None, rtol=1e-3, atol=1e-5, top=None, verbosity=0
    ) -> None:
        """`assert_logw_next_consistency` and `assert_autoreg_fact` at each of `contexts`,
        then `assert_batch_consistency` over `batch_contexts` (default `contexts`; `[]`
        skips it). `verbosity > 0` prints each check that holds.

        Raises:
            AssertionError: a check fails.
        """
        for context in contexts:
            await self.assert_logw_next_consistency(context, rtol, atol, top, verbosity)
            await self.assert_autoreg_fact(context, rtol, atol, verbosity)
        group = contexts if batch_contexts is None else batch_contexts
        if group:
            await self.assert_batch_consistency(group, rtol, atol, verbosity)

    async def assert_logw_next_consistency(self, context, rtol=1e-3, atol=1e-5, top=None, verbosity=0):
        """Check `logw_next` against `prefix`/`complete` differences at `context` (the
        `top` heaviest tokens, all by default)."""
        from genlm.control import testing

        await testing.assert_logw_next_consistency(
            self, context, top=top, rtol=rtol, atol=atol, verbosity=verbosity
        )

    async def assert_autoreg_fact(self, context, rtol=1e-3, atol=1e-5, verbosity=0):
        """Check `complete(ctx) = prefix([]) + Σ logw_next + logw_next[EOS]`."""
        from genlm.control import testing

        await testing.assert_autoreg_fact(self, context, rtol=rtol, atol=atol, verbosity=verbosity)

    async def assert_batch_consistency(self, contexts, rtol=1e-3, atol=1e-5, verbosity=0):
        """Check that every batch method agrees with its single-context version."""
        from genlm.control import testing

        await testing.assert_batch_consistency(self, contexts, rtol=rtol, atol=atol, verbosity=verbosity)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(|V|={len(self.tables.vocab)})"


__all__ = ["EOS", "Potential", "SparseLogws"]
