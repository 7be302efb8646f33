"""Token samplers: propose the next token with a properly weighted importance weight.

A token sampler for a target potential `t` returns `(token, logw, logp)` such that for
every function `f`:

    E[exp(logw) · f(token)] = Σ_x f(x) · exp(t.logw_next(ctx)[x])

where `logp` is the log probability with which `token` was proposed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._returns import SAMPLER_CHECKS, check_returns
from genlm.control._warn import warn_user
from genlm.control.draw import draw_from, draw_many, using_rng
from genlm.control.potential import fast_paths
from genlm.control.potential.base import Potential
from genlm.control.potential.fast_paths import vectorised_logw_next
from genlm.control.sampler.budget import budget_of
from genlm.control.weights import eos_column
from genlm.control.window import gather_or_cancel

if TYPE_CHECKING:  # pragma: no cover
    from genlm.control.sampler.sequence import Sequences

DrawFn = Callable[[dict], Any]


class TokenSampler(ABC):
    """Base class of token samplers over a target potential.

    A subclass defined outside genlm-control has what its `sample` and `logw_eos`
    return checked at each call (a `(token, logw, logp)` tuple and a float): a
    forgotten `return` is a `TypeError` naming the class and method.

    Args:
        target: the potential whose `logw_next` the draws are properly weighted for.
    """

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        check_returns(cls, SAMPLER_CHECKS)

    #: Whether a context this sampler extends is a list of the tokens SMC's
    #: `max_tokens` counts, so that inside a run it may draw only tokens that can end
    #: within it (`genlm.control.sampler.budget`); a multi-token unit sampler's are not.
    budget_in_tokens: bool = True

    def __init__(self, target: Potential):
        if not isinstance(target, Potential):
            raise TypeError(f"a token sampler needs a Potential target, got {type(target).__name__}")
        self.target = target
        self.token_type = target.token_type

    @abstractmethod
    async def sample(self, context: list, draw: DrawFn | None = None) -> tuple[Any, float, float]:
        """Propose one token after `context`.

        Args:
            context: the tokens so far.
            draw: optional choice function (dict token → probability to a token) that
                replaces every random choice the sampler makes.

        Returns:
            `(token, logw, logp)`: the token, its properly weighted log weight, and the
            log probability of the random choices that produced it.
        """

    async def batch_sample(self, contexts: list[list], rngs: list[np.random.Generator]) -> list[tuple[Any, float, float]]:
        """`sample` after each context, drawing with `rngs[i]` for context `i`.

        SMC steps its particles with one call of this method. By default it runs
        `sample` once per context, concurrently; a sampler that can serve the whole
        batch at once overrides it.
        """

        async def one(context: list, rng: np.random.Generator) -> tuple[Any, float, float]:
            with using_rng(rng):
                return await self.sample(context)

        return await gather_or_cancel(*(one(c, r) for c, r in zip(contexts, rngs)))

    async def start_weight(self) -> float:
        """Log weight of the empty sequence under the target: `target.prefix([])`."""
        return await self.target.prefix([])

    async def logw_eos(self, context: list) -> float:
        """Log weight that forcing EOS after `context` contributes:
        `target.logw_next(ctx)[EOS] = target.complete(ctx) - target.prefix(ctx)`."""
        logws = await self.target.logw_next(context)
        return logws[self.target.eos]

    async def batch_logw_eos(self, contexts: list[list]) -> list[float]:
        """`logw_eos` of each context (concurrent calls by default)."""
        return await gather_or_cancel(*(self.logw_eos(c) for c in contexts))

    async def smc(
        self,
        n_particles: int,
        ess_threshold: float,
        max_tokens: int,
        critic: Potential | None = None,
        **kwargs: Any,
    ) -> "Sequences":
        """Run SMC with this sampler: `SMC(self, critic)(n_particles, ess_threshold, max_tokens, **kwargs)`."""
        # The one arrow from sampler/ up to smc/ (0.4.1's convenience method), taken on
        # first use; tests/test_layout.py declares it.
        from genlm.control.smc.front import SMC

        return await SMC(self, critic=critic)(
            n_particles=n_particles, ess_threshold=ess_threshold, max_tokens=max_tokens, **kwargs
        )

    def ending_factors(self) -> list[Potential] | None:
        """The potentials whose EOS entries price ending for SMC's default end twist,
        or None (no default twist; the base class's answer).

        The twist is for a condition: a condition's prefix says only whether a string
        can still be completed, not what completing costs, so an unfinished particle's
        weight leaves out the price of ending that a finished one has paid. A sampler
        whose units are tokens of a target with such a price names the factors that
        price it; leaving a factor out only lowers the charge, which is exact
        whatever it is (the charge is a function of the context alone)."""
        return None

    def cleanup(self) -> Cleaned:
        """Release resources held by the sampler (none by default); awaitable too."""
        return cleaned()


class DirectTokenSampler(TokenSampler):
    """Draws exactly from the normalized `potential.logw_next`, or from a proposal.

    Without a proposal: `token ~ w / Σw`, `logw = log Σ_x w(x)`.
    With a proposal `q`: `token ~ q / Σq`, `logw = log w(token) - log q̄(token)`.

    Args:
        potential: the target.
        proposal: optional potential over the same vocabulary to draw from.
        autobatch: serve concurrent calls of the particles as batches.
    """

    def __init__(self, potential: Potential, proposal: Potential | None = None, autobatch: bool = True):
        _check_potential("potential", potential)
        if proposal is not None:
            _check_potential("proposal", proposal)
            if proposal.vocab_eos != potential.vocab_eos:
                raise ValueError(
                    "the proposal's vocabulary must equal the target's, token for token "
                    f"({len(proposal.vocab)} vs {len(potential.vocab)} tokens): are they from "
                    "different tokenizers?"
                )
        warn_slow_rows(potential)
        self.autobatch = autobatch
        self.potential = potential.to_autobatched() if autobatch else potential
        self.proposal = None
        if proposal is not None:
            self.proposal = proposal.to_autobatched() if autobatch else proposal
        super().__init__(self.potential)

    def ending_factors(self) -> list[Potential] | None:
        """The factors of a product target that price ending, less the conditions
        that declare `allowed_next` or `batch_allowed` (an EOS entry of 0 or `-inf`
        prices nothing), through their memoized batching views when the sampler
        autobatches (other runs' calls share their batches); None for a lone
        potential, which prices its own prefixes (an LM's is the probability of all
        its continuations)."""
        factors = _factors(self.potential)
        if len(factors) < 2:
            return None
        pricing = [
            f for f in factors if fast_paths.allowed_next(f) is None and fast_paths.batch_allowed(f) is None
        ]
        return [f.to_autobatched() if self.autobatch else f for f in pricing] or None

    async def sample(self, context, draw=None):
        budget = await budget_of(self.potential, [context])
        if self.proposal is None:
            logws = await self.potential.logw_next(context)
            if budget is not None:
                (logws,) = budget.mask(self.potential, [logws])
            d = await draw_from(logws, draw=draw)
        else:
            logws, q = await gather_or_cancel(
                self.potential.logw_next(context), self.proposal.logw_next(context)
            )
            if budget is not None:
                (logws,), (q,) = budget.mask(self.potential, [logws]), budget.mask(self.proposal, [q])
            d = await draw_from(q, draw=draw, target=logws)
        return d.token, (d.logw if budget is None else budget.weight(0, d.logw)), d.logp

    async def batch_sample(self, contexts, rngs):
        """One `batch_logw_next` call and one stacked draw for the whole batch."""
        if not self.autobatch or type(self).sample is not DirectTokenSampler.sample:
            return await super().batch_sample(contexts, rngs)
        budget = await budget_of(self.potential, contexts)
        if self.proposal is None:
            rows = await self.potential.batch_logw_next(contexts)
            if budget is not None:
                rows = budget.mask(self.potential, rows)
            draws = await draw_many(rows, rngs)
        else:
            rows, qs = await gather_or_cancel(
                self.potential.batch_logw_next(contexts), self.proposal.batch_logw_next(contexts)
            )
            if budget is not None:
                rows, qs = budget.mask(self.potential, rows), budget.mask(self.proposal, qs)
            draws = await draw_many(qs, rngs, targets=rows)
        if budget is None:
            return [(d.token, d.logw, d.logp) for d in draws]
        return [(d.token, budget.weight(i, d.logw), d.logp) for i, d in enumerate(draws)]

    async def batch_logw_eos(self, contexts: list[list]) -> list[float]:
        """The EOS entries of one `batch_logw_next` (one read-back for device rows)."""
        if type(self).logw_eos is not TokenSampler.logw_eos or not contexts:
            return await super().batch_logw_eos(contexts)
        return eos_column(await self.target.batch_logw_next(contexts))

    def cleanup(self) -> Cleaned:
        proposal = None if self.proposal is None else self.proposal.cleanup()
        return cleaned(self.potential.cleanup(), proposal)


def _check_potential(name: str, value: Any) -> None:
    if not isinstance(value, Potential):
        raise TypeError(f"{name} must be a Potential, got {type(value).__name__}")


SLOW_ROW_VOCAB = 256  # a derived row over more tokens than this is worth a warning
_WARNED_SLOW: set[type] = set()


def _factors(potential: Potential) -> list[Potential]:
    """The factors of a product (through autobatched views), else the potential."""
    from genlm.control.potential.autobatch import AutoBatchedPotential
    from genlm.control.potential.product import Product

    if isinstance(potential, Product):
        return _factors(potential.p1) + _factors(potential.p2)
    if isinstance(potential, AutoBatchedPotential):
        return _factors(potential.potential)
    return [potential]


def warn_slow_rows(potential: Potential) -> None:
    """Warn (once per class, at the user's line) about each factor whose rows are the
    base class's derived `logw_next`: one `prefix` call per token of a large vocabulary,
    for every particle at every step."""
    for factor in _factors(potential):
        cls = factor.rows_class()
        if cls in _WARNED_SLOW or len(factor.vocab) <= SLOW_ROW_VOCAB or vectorised_logw_next(factor):
            continue
        _WARNED_SLOW.add(cls)
        warn_user(
            f"{cls.__name__} defines only prefix/complete, so each of its logw_next rows calls "
            f"prefix once per token of its {len(factor.vocab)}-token vocabulary, for every "
            "particle at every step. Use it as the critic instead (`sampler.smc(..., "
            "critic=potential)` scores each particle once per step, with the same target), "
            "or implement `batch_logw_next` or `sparse_logw_next` (see docs/custom-potentials.md)"
        )


def direct_token_sampler(potential: Potential, proposal: Potential | None = None) -> DirectTokenSampler:
    """A `DirectTokenSampler` over `potential` (drawing from `proposal` when given)."""
    return DirectTokenSampler(potential, proposal=proposal)


# genlm-control 0.4.1 defined these here; they live in their own modules now and are
# imported on first access (their modules import this one).
_MOVED = {"SetTokenSampler": "genlm.control.sampler.set", "AWRS": "genlm.control.sampler.awrs"}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["TokenSampler", "DirectTokenSampler", "direct_token_sampler", *_MOVED]
