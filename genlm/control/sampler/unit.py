"""Multi-token units: one SMC step samples a unit (a word, a line, a statement).

A unit is a list of subunit tokens drawn one by one by a subunit sampler until a
boundary predicate says the unit is complete, EOS is drawn (EOS is then the unit's
last subunit), or `max_subunits_per_unit` subunits were drawn. Its weight is the sum
of the subunits' log weights, so by the tower property

    E[exp(logw) · f(unit)] = Σ_u f(u) · Π_i exp(t.logw_next(ctx + u[:i])[u_i]),

i.e. the unit is properly weighted for the subunit target's weight of the unit.
Contexts are lists of units; `genlm.control.util.flatten_units` recovers the tokens.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable

from genlm.control._args import positive_int
from genlm.control.constant import EndOfSequence
from genlm.control.sampler.token import TokenSampler
from genlm.control.util import flatten_units
from genlm.control.weights import NEG_INF

Boundary = Callable[[list, list], Any]


class BoundaryPredicate(ABC):
    """Base class of boundary predicates: `(unit_context, subunits) -> bool` says whether
    `subunits` form a complete unit after the units `unit_context` (0.4.1's base class;
    any callable of that shape works as a predicate)."""

    @abstractmethod
    def __call__(self, unit_context: list, subunits: list) -> bool:
        """Whether `subunits` complete a unit."""


class TokenSetBoundary(BoundaryPredicate):
    """A unit ends after any token of `tokens` (e.g. whitespace or newline tokens)."""

    def __init__(self, tokens: Iterable[Any]):
        self.tokens = set(tokens)
        if not self.tokens:
            raise ValueError("TokenSetBoundary needs at least one boundary token")

    def __call__(self, unit_context: list, subunits: list) -> bool:
        return bool(subunits) and subunits[-1] in self.tokens

    def __repr__(self) -> str:
        return f"TokenSetBoundary({sorted(map(repr, self.tokens))})"


class FixedLengthBoundary(BoundaryPredicate):
    """A unit ends after `length` subunits."""

    def __init__(self, length: int):
        self.length = positive_int("FixedLengthBoundary length", length)

    def __call__(self, unit_context: list, subunits: list) -> bool:
        return len(subunits) >= self.length

    def __repr__(self) -> str:
        return f"FixedLengthBoundary({self.length})"


class CFGBoundary(BoundaryPredicate):
    """A unit ends when its subunits, joined, form a complete sentence of a Boolean
    grammar potential: `cfg.complete(join(subunits)) > -inf`.

    Args:
        cfg: a Boolean potential over items (bytes as ints, or characters).
    """

    def __init__(self, cfg: Any):
        if not hasattr(cfg, "complete"):
            raise TypeError(f"CFGBoundary needs a potential with complete(), got {type(cfg).__name__}")
        self.cfg = cfg

    def _items(self, subunits: list) -> list:
        parts = [s for s in subunits if not isinstance(s, EndOfSequence)]
        if all(isinstance(s, (bytes, bytearray)) for s in parts):
            return list(b"".join(parts))
        if all(isinstance(s, str) for s in parts):
            return list("".join(parts))
        return parts

    async def __call__(self, unit_context: list, subunits: list) -> bool:
        return await self.cfg.complete(self._items(subunits)) > NEG_INF

    def __repr__(self) -> str:
        return f"CFGBoundary({self.cfg!r})"


class MultiTokenUnitSampler(TokenSampler):
    """Samples a whole unit of subunit tokens per call (see the module docstring).

    Args:
        subunit_sampler: a token sampler over subunits.
        boundary_predicate: `(unit_context, subunits) -> bool` (or an awaitable bool);
            `unit_context` is the context of units, `subunits` the unit so far.
        max_subunits_per_unit: the most subunits a unit may hold.

    Raises:
        TypeError: if `subunit_sampler` is not a `TokenSampler` or the predicate is not callable.
        ValueError: if `max_subunits_per_unit < 1`.
    """

    budget_in_tokens = False  # SMC's max_tokens counts units, not the subunits

    def __init__(
        self,
        subunit_sampler: TokenSampler,
        boundary_predicate: Boundary,
        max_subunits_per_unit: int = 100,
    ):
        if not isinstance(subunit_sampler, TokenSampler):
            raise TypeError(
                f"subunit_sampler must be a TokenSampler, got {type(subunit_sampler).__name__}"
            )
        if not callable(boundary_predicate):
            raise TypeError("boundary_predicate must be callable (unit_context, subunits) -> bool")
        positive_int("max_subunits_per_unit", max_subunits_per_unit)
        self.subunit_sampler = subunit_sampler
        self.boundary_predicate = boundary_predicate
        self.max_subunits_per_unit = int(max_subunits_per_unit)
        super().__init__(subunit_sampler.target)

    async def _ends(self, context: list, subunits: list) -> bool:
        out = self.boundary_predicate(context, subunits)
        if inspect.isawaitable(out):
            out = await out
        return bool(out)

    async def sample(self, context, draw=None):
        """Draw subunits until the boundary, EOS, a zero weight or the length cap.

        Returns:
            `(unit, Σ logw, Σ logp)` with `unit` a list of subunit tokens.
        """
        tokens = flatten_units(context)
        unit: list = []
        logw = logp = 0.0
        eos = self.target.eos
        while True:
            token, w, p = await self.subunit_sampler.sample(tokens + unit, draw=draw)
            unit.append(token)
            logw += w
            logp += p
            if w == NEG_INF or token == eos or len(unit) >= self.max_subunits_per_unit:
                break
            if await self._ends(context, unit):
                break
        return unit, logw, logp

    async def start_weight(self) -> float:
        return await self.subunit_sampler.start_weight()

    async def logw_eos(self, context: list) -> float:
        """The forced-EOS correction at the flattened context."""
        return await self.subunit_sampler.logw_eos(flatten_units(context))

    def cleanup(self) -> None:
        self.subunit_sampler.cleanup()

    def __repr__(self) -> str:
        return f"MultiTokenUnitSampler({self.subunit_sampler!r}, {self.boundary_predicate!r})"


__all__ = ["BoundaryPredicate", "CFGBoundary", "FixedLengthBoundary", "MultiTokenUnitSampler", "TokenSetBoundary"]
