"""`Product`: the pointwise product of two potentials over their shared vocabulary."""

from __future__ import annotations

from typing import Any

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._device import index_for, is_tensor, masked, match
from genlm.control._warn import warn_user
from genlm.control.potential import fast_paths
from genlm.control.potential.base import Potential
from genlm.control.weights import LazyWeights, weights_block
from genlm.control.window import gather_or_cancel


class TokenTypeMismatch(TypeError, ValueError):
    """Factors of a `Product` over different token types: a `TypeError` (ours) and a
    `ValueError` (what 0.4.1 raised), so code catching either keeps working."""


class SharedVocabularyWarning(RuntimeWarning, UserWarning):
    """A `Product` keeps fewer tokens than a factor has: a `RuntimeWarning` (as in
    0.4.1) and a `UserWarning` (ours)."""


class Product(Potential):
    """`Product(p1, p2).prefix(xs) = p1.prefix(xs) + p2.prefix(xs)`, likewise `complete`
    and `logw_next`, over the tokens both vocabularies share.

    It declares no fast path (`genlm.control.potential.fast_paths`) of its own: its
    rows are its factors' `batch_logw_next` rows added, and it does not combine
    their states, masks or set checks.

    Raises:
        TokenTypeMismatch (a TypeError and a ValueError): the token types differ
            (coerce one potential first).
        ValueError: if the vocabularies share no token.

    Warns:
        SharedVocabularyWarning (a RuntimeWarning and a UserWarning): the shared
            vocabulary is smaller than a factor's.
    """

    def __init__(self, p1: Potential, p2: Potential):
        if not (isinstance(p1, Potential) and isinstance(p2, Potential)):
            raise TypeError("Product takes two potentials")
        if p1.token_type != p2.token_type:
            raise TokenTypeMismatch(
                f"Potentials in product must have the same token type. Got "
                f"{p1.token_type!r} and {p2.token_type!r}.\nMaybe you forgot to coerce the "
                "potentials to the same token type? See `Coerce`. (Cannot multiply potentials with "
                "different token types; coerce one of them first, e.g. fsa.coerce(llm, f=b''.join).)"
            )
        if p1.eos != p2.eos:
            raise ValueError(f"potentials end with different markers: {p1.eos!r}, {p2.eos!r}")
        self.p1, self.p2 = p1, p2
        self._on1: dict = {}
        self._on2: dict = {}
        t1, t2 = p1.tables, p2.tables
        if t1 is t2 or t1.vocab == t2.vocab:
            self._idx1 = self._idx2 = None
            super().__init__(tables=t1)
            return
        shared = [x for x in t1.vocab if x in t2.lookup]
        if not shared:
            raise ValueError(
                f"Potentials in product must share a common vocabulary: the vocabularies of "
                f"{p1!r} and {p2!r} share no token, so their product is empty"
            )
        if len(shared) < max(len(t1.vocab), len(t2.vocab)):
            warn_user(
                f"Product keeps the {len(shared)} tokens shared by vocabularies of sizes "
                f"{len(t1.vocab)} and {len(t2.vocab)}",
                SharedVocabularyWarning,
            )
        super().__init__(shared, token_type=p1.token_type, eos=p1.eos)
        vocab_eos = self.tables.vocab_eos
        self._idx1 = np.array([t1.lookup[x] for x in vocab_eos])
        self._idx2 = np.array([t2.lookup[x] for x in vocab_eos])

    @property
    def v1_idxs(self) -> Any:
        """For each token of `vocab_eos`, its index in `p1.vocab_eos` (a list); `...`
        (all of them, in order) when the factors share one vocabulary."""
        return ... if self._idx1 is None else self._idx1.tolist()

    @property
    def v2_idxs(self) -> Any:
        """As `v1_idxs`, into `p2.vocab_eos`."""
        return ... if self._idx2 is None else self._idx2.tolist()

    async def prefix(self, context: list) -> float:
        """`p1.prefix + p2.prefix`; `p2` is not asked when `p1` gives `-inf` (as in
        0.4.1). The batched forms ask both factors at once."""
        a = await self.p1.prefix(context)
        return a if a == float("-inf") else a + await self.p2.prefix(context)

    async def complete(self, context: list) -> float:
        """`p1.complete + p2.complete`; `p2` is not asked when `p1` gives `-inf`."""
        a = await self.p1.complete(context)
        return a if a == float("-inf") else a + await self.p2.complete(context)

    async def batch_prefix(self, contexts):
        a, b = await gather_or_cancel(self.p1.batch_prefix(contexts), self.p2.batch_prefix(contexts))
        return np.asarray(a) + np.asarray(b)

    async def batch_complete(self, contexts):
        a, b = await gather_or_cancel(
            self.p1.batch_complete(contexts), self.p2.batch_complete(contexts)
        )
        return np.asarray(a) + np.asarray(b)

    def _combine(self, w1: Any, w2: Any) -> Any:
        """`w1 + w2` on the shared tokens, on the device of a tensor operand."""
        w1, w2 = match(w1, w2)
        if self._idx1 is None:
            return w1 + w2
        return w1[..., index_for(self._idx1, w1, self._on1)] + w2[..., index_for(self._idx2, w2, self._on2)]

    async def logw_next(self, context: list) -> LazyWeights:
        a, b = await gather_or_cancel(self.p1.logw_next(context), self.p2.logw_next(context))
        return self.make_lazy_weights(self._combine(a.weights, b.weights))

    def _masking(self) -> tuple[Potential, Any] | None:
        """`(other, batch_allowed)` when one factor is a Boolean mask that can answer
        on the other's device (`batch_allowed`, e.g. a compiled engine) and the
        vocabularies are equal; None otherwise."""
        if self._idx1 is not None:
            return None
        for other, mask in ((self.p1, self.p2), (self.p2, self.p1)):
            allowed = fast_paths.batch_allowed(mask)
            if allowed is not None and fast_paths.cheap_logw_next(mask):
                return other, allowed
        return None

    @property
    def batch_tokens_to_finish(self) -> Any:  # type: ignore[override]
        """The larger of the factors' bounds on the tokens still needed to end (a
        product ends only where both do); None when neither factor offers one."""
        bounds = [fast_paths.tokens_to_finish(p) for p in (self.p1, self.p2)]
        if bounds == [None, None]:
            return None

        async def both(contexts):
            n = len(self.vocab_eos)
            out = np.zeros((len(contexts), n))
            for bound, idx in zip(bounds, (self._idx1, self._idx2)):
                if bound is not None:
                    rows = np.asarray(await bound(contexts), dtype=np.float64)
                    np.maximum(out, rows if idx is None else rows[:, idx], out=out)
            return out

        return both

    @property
    def batch_most_tokens_to_finish(self) -> Any:  # type: ignore[override]
        """The larger of the factors' `MostTokensToFinish` (a factor without a bound
        counts 0, as in `batch_tokens_to_finish`); None when a factor with a bound
        offers none, or when neither factor has a bound."""
        bounds = [fast_paths.tokens_to_finish(p) for p in (self.p1, self.p2)]
        mosts = [fast_paths.most_tokens_to_finish(p) for p in (self.p1, self.p2)]
        if bounds == [None, None] or any(b is not None and m is None for b, m in zip(bounds, mosts)):
            return None

        async def both(contexts):
            out = np.zeros(len(contexts))
            for most in mosts:
                if most is not None:
                    np.maximum(out, np.asarray(await most(contexts), dtype=np.float64), out=out)
            return out

        return both

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        """The factors' rows added; when one factor is an engine mask and the other's
        rows are tensors, the mask is applied on their device instead of adding a
        row of 0/-inf made on the host."""
        masking = self._masking() if contexts else None
        if masking is not None:
            other, allowed_of = masking
            block = weights_block(await other.batch_logw_next(contexts))
            if is_tensor(block):
                allowed = await allowed_of(contexts, block)
                return self.rows_to_weights(masked(allowed, block))
            mask_rows = await (self.p2 if other is self.p1 else self.p1).batch_logw_next(contexts)
            return self.rows_to_weights(self._combine(block, weights_block(mask_rows)))
        a, b = await gather_or_cancel(
            self.p1.batch_logw_next(contexts), self.p2.batch_logw_next(contexts)
        )
        if not contexts:
            return []
        w1 = weights_block(a)
        w2 = weights_block(b)
        return self.rows_to_weights(self._combine(w1, w2))

    def spawn(self) -> "Product":
        return Product(self.p1.spawn(), self.p2.spawn())

    def cleanup(self) -> Cleaned:
        return cleaned(self.p1.cleanup(), self.p2.cleanup())

    def __repr__(self) -> str:
        return f"Product({self.p1!r}, {self.p2!r})"
