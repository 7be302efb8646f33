"""Reweighted potentials: `Tempered` (a power) and `Normalized` (local normalization)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from genlm.control._args import is_real, reject_bool
from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._device import is_tensor
from genlm.control.potential.base import Potential
from genlm.control.weights import LazyWeights, LazyWeightsBatch, logsumexp


class Tempered(Potential):
    """`Tempered(p, a).prefix(xs) = a · p.prefix(xs)`, i.e. the weight `p(xs) ** a`.

    Any finite `a` is allowed, as in 0.4.1: `a = 0` flattens `p` to its support and
    `a < 0` inverts its weights. A weight of zero stays zero for every `a` (a `-inf`
    log weight is kept, not multiplied into NaN or `+inf`).

    Raises:
        TypeError: if `a` is a bool.
        ValueError: if `a` is not a finite number (NumPy scalars are numbers).
    """

    def __init__(self, potential: Potential, exponent: float):
        reject_bool("the temperature exponent", exponent)
        if not is_real(exponent) or not math.isfinite(exponent):
            raise ValueError(f"temperature exponent must be a finite number, got {exponent!r}")
        self.potential = potential
        self.exponent = float(exponent)
        super().__init__(tables=potential.tables)

    @property
    def p(self) -> Potential:
        """The tempered potential (0.4.1's name)."""
        return self.potential

    @property
    def beta(self) -> float:
        """The exponent (0.4.1's name)."""
        return self.exponent

    def is_terminal_only(self) -> bool:
        return self.potential.is_terminal_only()

    def _scale(self, w: Any) -> Any:
        """`a · w` with `-inf` entries kept (for `a > 0` they stay `-inf` anyway)."""
        if self.exponent > 0:
            return self.exponent * w
        if is_tensor(w):
            return w.where(w.isneginf(), w * self.exponent)
        w = np.asarray(w, dtype=np.float64)
        with np.errstate(invalid="ignore"):  # -inf · 0 is NaN, replaced by -inf here
            return np.where(np.isneginf(w), w, w * self.exponent)

    async def prefix(self, context):
        return float(self._scale(np.float64(await self.potential.prefix(context))))

    async def complete(self, context):
        return float(self._scale(np.float64(await self.potential.complete(context))))

    async def batch_prefix(self, contexts):
        return self._scale(np.asarray(await self.potential.batch_prefix(contexts), dtype=np.float64))

    async def batch_complete(self, contexts):
        return self._scale(np.asarray(await self.potential.batch_complete(contexts), dtype=np.float64))

    async def logw_next(self, context) -> LazyWeights:
        w = await self.potential.logw_next(context)
        return self.make_lazy_weights(self._scale(w.weights))

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        ws = await self.potential.batch_logw_next(contexts)
        return LazyWeightsBatch([self.make_lazy_weights(self._scale(w.weights)) for w in ws])

    def spawn(self) -> "Tempered":
        return Tempered(self.potential.spawn(), self.exponent)

    def cleanup(self) -> Cleaned:
        return cleaned(self.potential.cleanup())

    def __repr__(self) -> str:
        return f"Tempered({self.potential!r}, {self.exponent})"


class Normalized(Potential):
    """The locally normalized version of a potential.

    `Normalized(p).logw_next(ctx) = p.logw_next(ctx) - log Σ_x exp(p.logw_next(ctx)[x])`,
    so `prefix(xs) = p.prefix([]) + Σ_i logw_next(xs[:i])[xs[i]]` and
    `complete(xs) = prefix(xs) + logw_next(xs)[EOS]`: `exp(p.prefix([]))` times a
    distribution over finished sequences (the start weight is `p`'s, as in 0.4.1; for
    an LM, `p.prefix([]) = 0`).
    """

    def __init__(self, potential: Potential):
        self.potential = potential
        super().__init__(tables=potential.tables)

    @property
    def p(self) -> Potential:
        """The normalized potential (0.4.1's name)."""
        return self.potential

    @staticmethod
    def _norm(w: Any) -> Any:
        z = logsumexp(w, axis=-1)
        if is_tensor(w):
            z = z.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
            return w - (z[..., None] if w.dim() > 1 else z)
        z = np.where(np.isfinite(z), z, 0.0)
        return w - (z[..., None] if np.ndim(w) > 1 else z)

    async def logw_next(self, context) -> LazyWeights:
        w = await self.potential.logw_next(context)
        return self.make_lazy_weights(self._norm(w.weights))

    async def batch_logw_next(self, contexts) -> list[LazyWeights]:
        ws = await self.potential.batch_logw_next(contexts)
        return LazyWeightsBatch([self.make_lazy_weights(self._norm(w.weights)) for w in ws])

    async def _path_logws(self, context, eos: bool) -> float:
        tokens = list(context) + ([self.eos] if eos else [])
        contexts = [list(context[:i]) for i in range(len(tokens))]
        if not contexts:
            return 0.0
        try:
            rows = await self.batch_logw_next(contexts)
        except ValueError:
            # A context on the path has weight zero, where the inner potential's
            # logw_next is undefined: walk the path and stop at the first zero.
            total = 0.0
            for ctx, tok in zip(contexts, tokens):
                total += (await self.logw_next(ctx))[tok]
                if total == float("-inf"):
                    break
            return total
        return float(sum(row[t] for row, t in zip(rows, tokens)))

    async def _start(self) -> float:
        return float(await self.potential.prefix([]))

    async def prefix(self, context):
        start = await self._start()
        return start if start == float("-inf") else start + await self._path_logws(context, eos=False)

    async def complete(self, context):
        start = await self._start()
        return start if start == float("-inf") else start + await self._path_logws(context, eos=True)

    def spawn(self) -> "Normalized":
        return Normalized(self.potential.spawn())

    def cleanup(self) -> Cleaned:
        return cleaned(self.potential.cleanup())

    def __repr__(self) -> str:
        return f"Normalized({self.potential!r})"


__all__ = ["Tempered", "Normalized"]
