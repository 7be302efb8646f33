"""Multi-token units: one SMC step samples a unit (a word, a line, a statement).

A unit is a list of subunit tokens drawn one by one by a subunit sampler until a
boundary predicate says the unit is complete, or EOS is drawn (EOS is then the unit's
last subunit). Its weight is the sum of the subunits' log weights, so by the tower
property

    E[exp(logw) · f(unit)] = Σ_u f(u) · Π_i exp(t.logw_next(ctx + u[:i])[u_i]),

the sum running over complete units, i.e. the unit is properly weighted for the
subunit target's weight of complete units. A unit that reaches
`max_subunits_per_unit` subunits without a boundary is not a unit: it is returned
with weight `-inf`, as in 0.4.1.
Contexts are lists of units; `flatten_units` recovers the tokens.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable

from genlm.control._args import is_int, positive_int
from genlm.control._cleanup import Cleaned, cleaned
from genlm.control.constant import EndOfSequence
from genlm.control.sampler.token import TokenSampler
from genlm.control.weights import NEG_INF

Boundary = Callable[[list, list], Any]


def flatten_units(context: Iterable[Any]) -> list:
    """Flatten a context of units (lists of tokens) into one token list; tokens pass through."""
    out: list = []
    for unit in context:
        if isinstance(unit, list):
            out.extend(flatten_units(unit))
        else:
            out.append(unit)
    return out


class BoundaryPredicate(ABC):
    """Base class of boundary predicates: `(unit_context, subunits) -> bool` says whether
    `subunits` form a complete unit after the units `unit_context` (0.4.1's base class;
    any callable of that shape works as a predicate)."""

    @abstractmethod
    def __call__(self, unit_context: list, subunits: list) -> bool:
        """Whether `subunits` complete a unit."""

    def finalize_unit(self, subunits: list) -> list:
        """The unit made of `subunits` once they complete one (all of them by default;
        a subclass may drop a delimiter)."""
        return list(subunits)


class TokenSetBoundary(BoundaryPredicate):
    """A unit ends after any token of `tokens` (e.g. whitespace or newline tokens).

    A `Token` in `tokens` names its own id; plain bytes name every token with those
    bytes, so a `Token` subunit ends a unit when its bytes are in `tokens` (as in 0.4.1).
    """

    def __init__(self, tokens: Iterable[Any]):
        self.tokens = set(tokens)
        if not self.tokens:
            raise ValueError("TokenSetBoundary needs at least one boundary token")
        self._plain = {t for t in self.tokens if type(t) is bytes}

    def __call__(self, unit_context: list, subunits: list) -> bool:
        if not subunits:
            return False
        last = subunits[-1]
        if last in self.tokens:
            return True
        return isinstance(last, bytes) and type(last) is not bytes and bytes(last) in self._plain

    def __repr__(self) -> str:
        return f"TokenSetBoundary({sorted(map(repr, self.tokens))})"


class FixedLengthBoundary(BoundaryPredicate):
    """A unit ends after `length` subunits.

    Raises:
        TypeError: `length` is a bool or not an integer.
        ValueError: `length < 1` ("Length must be positive", 0.4.1's words).
    """

    def __init__(self, length: int):
        if is_int(length) and length < 1:
            raise ValueError(f"Length must be positive: FixedLengthBoundary's length is an integer ≥ 1, got {length!r}")
        self.length = positive_int("FixedLengthBoundary length", length)

    def __call__(self, unit_context: list, subunits: list) -> bool:
        return len(subunits) >= self.length

    def __repr__(self) -> str:
        return f"FixedLengthBoundary({self.length})"


class CFGBoundary(BoundaryPredicate):
    """A unit ends when its subunits, joined, form a complete sentence of a grammar.

    Two forms:

    - `CFGBoundary(cfg)`: `cfg` is a Boolean grammar potential over items (bytes as
      ints, or characters); a unit is complete when `cfg.complete(join(subunits)) > -inf`
      (the call is then awaitable).
    - `CFGBoundary(grammar_text, start_rule="start", complete_rules=None,
      min_length=2, parser_type="earley", ambiguity="explicit", encoding="utf-8",
      decode_errors="ignore")`, 0.4.1's form: a Lark grammar; a unit of at least
      `min_length` subunits whose decoded text (of at least `min_length` characters)
      parses from `start_rule` is complete, and when `complete_rules` is given the parse
      tree's root must be one of them (see `genlm.control.sampler._lark_boundary`).

    Raises:
        TypeError: `cfg` is neither grammar text nor a potential with `complete()`.
        ValueError: grammar text that Lark cannot build a parser from.
    """

    def __init__(self, cfg: Any, *args: Any, **kwargs: Any):
        if isinstance(cfg, str):
            from genlm.control.sampler._lark_boundary import LarkUnits

            self.cfg = None
            self.lark = LarkUnits(cfg, *args, **kwargs)
            return
        if args or kwargs:
            raise TypeError("CFGBoundary(cfg) takes no other arguments when cfg is a potential")
        if not hasattr(cfg, "complete"):
            raise TypeError(
                f"CFGBoundary needs Lark grammar text or a potential with complete(), "
                f"got {type(cfg).__name__}"
            )
        self.cfg = cfg
        self.lark = None

    def __getattr__(self, name: str) -> Any:
        # 0.4.1's attributes of the Lark form (parser, start_rule, complete_rules, ...).
        lark = self.__dict__.get("lark")
        if lark is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(lark, name)

    def get_parse_tree(self, text: str) -> Any:
        """The Lark parse tree of `text`, or None where it does not parse (Lark form)."""
        if self.lark is None:
            raise TypeError("get_parse_tree needs the Lark form, CFGBoundary(grammar_text)")
        return self.lark.parse_tree(text)

    def _items(self, subunits: list) -> list:
        parts = [s for s in subunits if not isinstance(s, EndOfSequence)]
        if all(isinstance(s, (bytes, bytearray)) for s in parts):
            return list(b"".join(parts))
        if all(isinstance(s, str) for s in parts):
            return list("".join(parts))
        return parts

    def __call__(self, unit_context: list, subunits: list) -> Any:
        if self.lark is not None:
            return self.lark.complete(subunits)
        return self._complete(subunits)

    async def _complete(self, subunits: list) -> bool:
        return await self.cfg.complete(self._items(subunits)) > NEG_INF

    def __repr__(self) -> str:
        if self.lark is not None:
            return repr(self.lark)
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
            `(unit, Σ logw, Σ logp)` with `unit` a list of subunit tokens (the
            predicate's `finalize_unit` of them at a boundary); the weight is `-inf`
            when the cap is reached without a boundary.
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
            if w == NEG_INF or token == eos:
                return unit, logw, logp
            if await self._ends(context, unit):
                finalize = getattr(self.boundary_predicate, "finalize_unit", None)
                return (unit if finalize is None else list(finalize(unit))), logw, logp
            if len(unit) >= self.max_subunits_per_unit:
                return unit, NEG_INF, logp

    async def start_weight(self) -> float:
        return await self.subunit_sampler.start_weight()

    async def logw_eos(self, context: list) -> float:
        """The forced-EOS correction at the flattened context."""
        return await self.subunit_sampler.logw_eos(flatten_units(context))

    def cleanup(self) -> Cleaned:
        return cleaned(self.subunit_sampler.cleanup())

    def __repr__(self) -> str:
        return f"MultiTokenUnitSampler({self.subunit_sampler!r}, {self.boundary_predicate!r})"


__all__ = [
    "BoundaryPredicate",
    "CFGBoundary",
    "FixedLengthBoundary",
    "MultiTokenUnitSampler",
    "TokenSetBoundary",
    "flatten_units",
]
