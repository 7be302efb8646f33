"""The fast paths a potential may declare, with their contracts.

A potential answers `prefix`, `complete` and `logw_next`; some can also answer a
cheaper question, and a sampler that knows it asks that one instead. Each such
fast path is declared on `Potential` (a flag, or an attribute that is None where
the path is not offered), so a caller asks the declaration and never probes
attributes or unwraps wrappers:

| Fast path | Declared by | Helper |
|---|---|---|
| `CarriesStates` | `stateful = True` and the three methods | `carrier(p)` |
| `CheapLogwNext` | `cheap_logw_next = True` | `cheap_logw_next(p)` |
| `SparseLogwNext` | overriding `sparse_logw_next` | `sparse_logw_next(p)` |
| `AllowedNext` | defining `async allowed_next` | `allowed_next(p)` |
| `BatchAllowed` | defining `async batch_allowed` | `batch_allowed(p)` |
| `TokenTrie` | a `token_trie` that is not None | `token_trie(p)` |
| `TokensToFinish` | defining `async batch_tokens_to_finish` | `tokens_to_finish(p)` |
| `MostTokensToFinish` | defining `async batch_most_tokens_to_finish` | `most_tokens_to_finish(p)` |
| `EosEntries` | defining `async batch_eos_entries` | `eos_entries(p)` |
| `CompiledCoercion` | defining `compiled_coercion` | `compiled_coercion(p)` |

The protocols type what a declared path offers; they are not checked with
`isinstance`, which would find every `Potential` (the base class names each path,
as None or False where it is not offered): ask the helpers.

`vectorised_logw_next(p)` says whether `logw_next` is anything but the base
class's one `prefix` call per token. Wrappers forward what their inner potential
declares: the autobatched view forwards every path, `GuidedCoerced` forwards its
engine's; `Product` and `Coerced` declare none of their own (a `Coerced` subclass
declares what it computes, e.g. `CoercedDFA`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.potential.base import Potential, SparseLogws


class CarriesStates(Protocol):
    """States carried along a context, read synchronously.

        logw_next_of(advance(state_of(ctx), x)) == logw_next(ctx + [x]).weights
        advance(state_of(ctx), x) is None  iff  prefix(ctx + [x]) = -inf

    States are opaque immutable values, valid after the potential's caches are
    cleared; `advance(None, x)` is None, and `logw_next_of(None)` is a ValueError.
    A caller walking a trie of extensions of one context pays for the context once.
    """

    stateful: bool

    def state_of(self, context: list) -> Any: ...

    def advance(self, state: Any, token: Any) -> Any: ...

    def logw_next_of(self, state: Any) -> np.ndarray: ...


class CheapLogwNext(Protocol):
    """`logw_next` and `batch_logw_next` cost about one `prefix` call (a compiled
    token mask, a cached per-state row), so a sampler may read a condition's whole
    row: AWRS then draws exactly from `potential * condition`."""

    cheap_logw_next: bool


class SparseLogwNext(Protocol):
    """`sparse_logw_next(ctx)` is `SparseLogws(indices, logws)` with

        logw_next(ctx).weights[indices] == logws,  every other entry -inf,

    or None at a context where the potential does not know its row to be sparse;
    `batch_logw_next` then scatters the live entries into one block from `alloc_rows`."""

    async def sparse_logw_next(self, context: list) -> "SparseLogws | None": ...


class AllowedNext(Protocol):
    """The Boolean answers for a set of next tokens, in one call:

        allowed_next(ctx, indices)[k] == (prefix(ctx + [vocab_eos[indices[k]]]) > -inf)

    for a token, and `complete(ctx) > -inf` at the index of EOS; all False when
    `ctx` itself has weight zero. AWRS checks its draws in blocks with it."""

    async def allowed_next(self, context: Sequence[Any], indices: Sequence[int]) -> Sequence[bool]: ...


class BatchAllowed(Protocol):
    """Where each context's `logw_next` row is finite, as one bool block:

        batch_allowed(contexts, like)[i, j] == (logw_next(contexts[i]).weights[j] > -inf)

    over `vocab_eos`, on the device of `like` when it is a torch tensor, else NumPy.
    A context of weight zero is a ValueError, as for `logw_next`."""

    async def batch_allowed(self, contexts: Sequence[Sequence[Any]], like: Any = None) -> Any: ...


class TokenTrie(Protocol):
    """A coerced potential's tokens as the paths of a symbol trie into an inner potential:

        prefix(ctx + [vocab[k]]) == inner.prefix(image(ctx) + trie.path(leaf[k]))
        complete(ctx) == inner.complete(image(ctx))

    For a Boolean inner potential a node whose prefix is -inf has only such nodes
    below it (a prefix's weight sums over its completions), so one answer at a node
    settles every token below it. AWRS's checks use this (`_awrs_checks`)."""

    trie: Any
    leaf: np.ndarray
    inner: "Potential"

    def image(self, context: Sequence[Any]) -> list: ...


class TokensToFinish(Protocol):
    """A lower bound on how many tokens a context still needs to end, per next token:

        batch_tokens_to_finish(contexts)[i, j] ≤ min{|z| : complete(ctx_i + [y_j] + z) > -inf}

    over `vocab_eos` (`y_j` its j-th entry; `z` holds no EOS), `inf` where there is no
    such `z` (in particular where `prefix(ctx_i + [y_j]) = -inf`); the EOS column is 0
    where `complete(ctx_i) > -inf`, else `inf`. A float64 NumPy block. A byte automaton
    gives the minimum itself (exact); any sound lower bound keeps a sampler that prunes
    by it exact, since it prunes only tokens that cannot end in time."""

    async def batch_tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray: ...


class MostTokensToFinish(Protocol):
    """Per context, an upper bound on the finite entries of its `batch_tokens_to_finish`
    row (`-inf` for a row without one), from a potential whose bound is `inf` only
    where its `logw_next` is `-inf`:

        batch_most_tokens_to_finish(contexts)[i] >= max{d in batch_tokens_to_finish([ctx_i])[0] : d < inf}

    A float64 NumPy array. The token budget asks it first: a context whose bound is
    within the tokens left prunes only tokens its row already rules out, so its row
    of bounds is never made."""

    async def batch_most_tokens_to_finish(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray: ...


class EosEntries(Protocol):
    """Each context's EOS entry, without its row:

        batch_eos_entries(contexts)[i] == logw_next(contexts[i]).weights[-1]

    bit for bit, NaN read as `-inf`, a float64 NumPy array. SMC's default end twist
    prices ending with it; a language model answers from its next-token block (the
    EOS tokens' log-sum-exp) without writing the vocabulary's row."""

    async def batch_eos_entries(self, contexts: Sequence[Sequence[Any]]) -> np.ndarray: ...


class CompiledCoercion(Protocol):
    """A coercion target that offers the compiled token-mask route (a language model
    over token ids offers it; the algebra never imports the engine):

        compiled_coercion(constraint, f, engine, form).prefix(xs) == constraint.prefix(f(xs))

    where it returns a potential at all: None sends `constraint.coerce(self, f)` down the
    generic path. `form` is the constraint's `EngineSource`; `engine` is the `engine=`
    of `coerce` (None: only where the engine's language is the constraint's; True:
    required, a `ValueError` where the engine cannot serve it)."""

    def compiled_coercion(self, constraint: Any, f: Any, engine: bool | None, form: Any) -> Any: ...


def carrier(potential: "Potential") -> CarriesStates | None:
    """`potential` when it declares `stateful`, else None."""
    return potential if potential.stateful else None


def cheap_logw_next(potential: "Potential") -> bool:
    """Whether `potential` declares `cheap_logw_next`."""
    return bool(potential.cheap_logw_next)


def sparse_logw_next(potential: "Potential") -> bool:
    """Whether `potential`'s rows come from a `sparse_logw_next` (its row class overrides it)."""
    from genlm.control.potential.base import Potential

    return potential.rows_class().sparse_logw_next is not Potential.sparse_logw_next


def allowed_next(potential: "Potential") -> AllowedNext | None:
    """`potential.allowed_next` when it offers one, else None.

    Raises:
        TypeError: an `allowed_next` that is set but not callable.
    """
    return _callable_or_none(potential, "allowed_next", potential.allowed_next)


def batch_allowed(potential: "Potential") -> BatchAllowed | None:
    """`potential.batch_allowed` when it offers one, else None.

    Raises:
        TypeError: a `batch_allowed` that is set but not callable.
    """
    return _callable_or_none(potential, "batch_allowed", potential.batch_allowed)


def token_trie(potential: "Potential") -> TokenTrie | None:
    """`potential.token_trie` when it offers one, else None."""
    return potential.token_trie


def tokens_to_finish(potential: "Potential") -> TokensToFinish | None:
    """`potential.batch_tokens_to_finish` when it offers one, else None.

    Raises:
        TypeError: a `batch_tokens_to_finish` that is set but not callable.
    """
    return _callable_or_none(potential, "batch_tokens_to_finish", potential.batch_tokens_to_finish)


def most_tokens_to_finish(potential: "Potential") -> MostTokensToFinish | None:
    """`potential.batch_most_tokens_to_finish` when it offers one, else None.

    Raises:
        TypeError: a `batch_most_tokens_to_finish` that is set but not callable.
    """
    return _callable_or_none(potential, "batch_most_tokens_to_finish", potential.batch_most_tokens_to_finish)


def eos_entries(potential: "Potential") -> EosEntries | None:
    """`potential.batch_eos_entries` when it offers one, else None.

    Raises:
        TypeError: a `batch_eos_entries` that is set but not callable.
    """
    return _callable_or_none(potential, "batch_eos_entries", potential.batch_eos_entries)


def compiled_coercion(target: Any) -> Any:
    """`target.compiled_coercion` when the coercion target offers the route, else None
    (a target that is no `Potential`, e.g. a plain vocabulary, offers none).

    Raises:
        TypeError: a `compiled_coercion` that is set but not callable.
    """
    return _callable_or_none(target, "compiled_coercion", getattr(target, "compiled_coercion", None))


def _callable_or_none(potential: "Potential", name: str, method: Any) -> Any:
    if method is not None and not callable(method):
        raise TypeError(
            f"{type(potential).__name__}.{name} must be an async method or None, "
            f"got {type(method).__name__}"
        )
    return method


_ROW_METHODS = ("logw_next", "batch_logw_next", "sparse_logw_next")


def vectorised_logw_next(potential: "Potential") -> bool:
    """Whether `potential` computes `logw_next` other than by one `prefix` call per
    token (the base class's definition): it carries states, or its row class
    overrides `logw_next`, `batch_logw_next` or `sparse_logw_next`."""
    from genlm.control.potential.base import Potential

    cls = potential.rows_class()
    return bool(potential.stateful) or any(
        getattr(cls, name) is not getattr(Potential, name) for name in _ROW_METHODS
    )


def declared(potential: "Potential") -> frozenset[str]:
    """The names of the fast paths `potential` declares (for tests and diagnostics)."""
    offered = {
        "stateful": carrier(potential) is not None,
        "cheap_logw_next": cheap_logw_next(potential),
        "sparse_logw_next": sparse_logw_next(potential),
        "allowed_next": allowed_next(potential) is not None,
        "batch_allowed": batch_allowed(potential) is not None,
        "token_trie": token_trie(potential) is not None,
        "tokens_to_finish": tokens_to_finish(potential) is not None,
        "most_tokens_to_finish": most_tokens_to_finish(potential) is not None,
        "eos_entries": eos_entries(potential) is not None,
        "compiled_coercion": compiled_coercion(potential) is not None,
    }
    return frozenset(name for name, yes in offered.items() if yes)


__all__ = [
    "AllowedNext",
    "BatchAllowed",
    "CarriesStates",
    "CheapLogwNext",
    "CompiledCoercion",
    "EosEntries",
    "MostTokensToFinish",
    "SparseLogwNext",
    "TokenTrie",
    "TokensToFinish",
    "allowed_next",
    "batch_allowed",
    "carrier",
    "cheap_logw_next",
    "compiled_coercion",
    "declared",
    "eos_entries",
    "most_tokens_to_finish",
    "sparse_logw_next",
    "token_trie",
    "tokens_to_finish",
    "vectorised_logw_next",
]
