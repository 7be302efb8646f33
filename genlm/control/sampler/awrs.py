"""Adaptive weighted rejection sampling (AWRS) of the next token under a Boolean condition.

Target: `t(x) = w(x) · c(x)`, where `w = potential.logw_next(ctx)` and `c ∈ {0, 1}` is a
Boolean condition, checked only on drawn tokens (Lipkin et al. 2025, "Fast Controlled
Generation from Language Models with Adaptive Weighted Rejection Sampling").

The sampler draws from the normalized proposal `q` (the potential by default) with
known rejects removed, so the first accepted token `x` is an exact draw from
`q` restricted to the allowed set `A`. Its weight is

    ŵ = w(x) / q(x) · Ẑ,    E[Ẑ | x] = q(A),

which makes `(x, ŵ)` properly weighted for `t`. `Ẑ` comes from the view of the search
as an i.i.d. stream `y_1, y_2, … ~ q` in which draws of known rejects are skipped (they
need no condition check). Run until `m = max_accepts` accepts, the stream's
accept/reject pattern is a Bernoulli(q(A)) sequence independent of which allowed
tokens are drawn, so Haldane's negative-binomial estimator `(m-1)/(m-1+K)` of `q(A)`,
with `K` the stream's rejections, is unbiased and independent of `x`. `K` counts the
observed distinct rejects `r` plus the skipped redraws `G_j ~ Geometric(s_j)` before
the j-th observed draw, where `s_j` is the `q`-mass not yet known to be rejected.
Averaging over the skipped redraws (Rao-Blackwellization) gives

    Ẑ = (m-1) ∫₀¹ t^(m-2+r) Π_j s_j / (1 - (1-s_j) t) dt        (m ≥ 2),

and `Ẑ = [r = 0]` for `m = 1`. With a finite `max_rejects` the skipped redraws are
simulated and the stream stops at `m` accepts or `max_rejects` rejections, whichever
comes first; the unbiased estimator of that closed sequential plan is the share of
lattice paths to the end point that start with an accept: `(m-1)/(m-1+K)` when `m`
accepts were reached, `a/(a+K_max-1)` when `a < m` accepts were.

When the condition can answer a set of tokens in one call, the draws are made and
checked in blocks, and a search with many rejects is finished by an exponential race
over the remaining tokens; both leave every law above unchanged (see `AWRS.search`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from genlm.control.draw import current_rng
from genlm.control.potential.base import Potential
from genlm.control.potential.product import Product
from genlm.control.sampler._awrs_estimates import _grid as _grid  # re-exported
from genlm.control.sampler._awrs_estimates import _log_factors as _log_factors  # re-exported
from genlm.control.sampler._awrs_estimates import (
    haldane_estimate,
    monte_carlo_estimate,
    rao_blackwell_estimate,
    truncated_estimate,
)
from genlm.control.sampler._awrs_search import _Chooser, _folded_max, _Pool, _Walk
from genlm.control.sampler.token import TokenSampler
from genlm.control.weights import NEG_INF, fold_nan
from genlm.control.window import gather_or_cancel


class Search(NamedTuple):
    """The outcome of one adaptive rejection search over the proposal's support.

    Attributes:
        first: support position of the first accepted token (None: none accepted).
        log_z: log of the estimate `Ẑ` of the proposal's accepted mass.
        logp: log probability of the random choices made.
        evaluations: number of condition checks.
    """

    first: int | None
    log_z: float
    logp: float
    evaluations: int


class AWRS(TokenSampler):
    """Adaptive weighted rejection sampling for `potential * condition`.

    Args:
        potential: the potential to draw from (e.g. a `PromptedLLM`).
        condition: a Boolean potential over the same vocabulary (`prefix` and
            `complete` are 0 or -inf, and 0 at the contexts sampled from); a token `x`
            is allowed when `condition.prefix(ctx + [x]) > -inf`, EOS when
            `condition.complete(ctx) > -inf`. A condition with an async method
            `allowed_next(ctx, indices)` (the same answers for the tokens at
            `indices` of `vocab_eos`, as a list or array of bools, in one call; e.g. the
            engine-backed constraints) has its draws checked in blocks.
        seed: seed of this sampler's own Generator; by default draws use
            `genlm.control.draw.current_rng()`.
        prune_logws: search only the tokens of positive proposal weight (tokens of
            weight zero are never drawn nor checked either way).
        proper_weights: return the unbiased weight (see the module docstring);
            when False, stop at the first accept and return `w(x)/q(x) · (1 - R)`, with
            `R` the proposal mass of the rejects found (exact token, biased weight).
        max_accepts: accepts `m ≥ 1` the stream runs to (2 gives low variance).
        max_rejects: cap on the stream's rejections (`inf`: none).
        n_monte_carlo_samples: estimate `Ẑ` from this many simulations of the skipped
            redraws instead of the exact integral (ignored when `draw` is given).
        proposal: optional potential over the same vocabulary to draw from instead
            of `potential`; it must be positive wherever `potential * condition` is.
        autobatch: serve the particles' concurrent calls as batches.

    Raises:
        ValueError: a vocabulary mismatch, `max_accepts < 1`, `max_rejects < 1`,
            `n_monte_carlo_samples < 1`.
    """

    def __init__(
        self,
        potential: Potential,
        condition: Potential,
        seed: int | None = None,
        prune_logws: bool = True,
        proper_weights: bool = True,
        max_accepts: int = 2,
        max_rejects: float = float("inf"),
        n_monte_carlo_samples: int | None = None,
        proposal: Potential | None = None,
        autobatch: bool = True,
    ):
        for name, value in (("potential", potential), ("condition", condition), ("proposal", proposal)):
            if not (value is None and name == "proposal") and not isinstance(value, Potential):
                raise TypeError(f"AWRS {name} must be a Potential, got {type(value).__name__}")
        for name, other in (("condition", condition), ("proposal", proposal)):
            if other is not None and other.vocab_eos != potential.vocab_eos:
                raise ValueError(
                    f"the {name}'s vocabulary must equal the potential's, token for token "
                    f"({len(other.vocab)} vs {len(potential.vocab)} tokens)"
                )
        if int(max_accepts) != max_accepts or max_accepts < 1:
            raise ValueError(f"max_accepts must be an integer ≥ 1, got {max_accepts!r}")
        if max_rejects != float("inf") and (int(max_rejects) != max_rejects or max_rejects < 1):
            raise ValueError(f"max_rejects must be an integer ≥ 1 or inf, got {max_rejects!r}")
        if n_monte_carlo_samples is not None and n_monte_carlo_samples < 1:
            raise ValueError(
                f"n_monte_carlo_samples must be ≥ 1 or None, got {n_monte_carlo_samples!r}"
            )

        def view(p):
            return None if p is None else (p.to_autobatched() if autobatch else p)

        self.potential, self.condition, self.proposal = view(potential), view(condition), view(proposal)
        self.seed = seed
        self.rng = None if seed is None else np.random.default_rng(seed)
        self.prune_logws = prune_logws
        self.proper_weights = proper_weights
        self.max_accepts = int(max_accepts)
        self.max_rejects = max_rejects
        self.n_monte_carlo_samples = n_monte_carlo_samples
        self._allowed_next = getattr(condition, "allowed_next", None)
        super().__init__(Product(self.potential, self.condition))

    block_size = 8  # draws checked together when the condition has `allowed_next`
    max_block = 4096  # the longest block
    vector_walk = 64  # blocks at least this long are walked in numpy
    race_after = 16  # rejects after which a Generator-driven search finishes by `_Walk.race`

    async def logw_eos(self, context: list) -> float:
        """`target.logw_next(ctx)[EOS]` without the condition's whole row (a coerced
        condition with only `prefix`/`complete` would walk every token for it):
        `potential.logw_next(ctx)[EOS] + condition.complete(ctx) - condition.prefix(ctx)`."""
        row, complete, prefix = await gather_or_cancel(
            self.potential.logw_next(context), self.condition.complete(context), self.condition.prefix(context)
        )
        if prefix == NEG_INF:
            raise ValueError(f"context {context!r} has weight zero under {self.condition!r}")
        return row[self.potential.eos] + complete - prefix

    async def _allowed(self, context: list, token: Any) -> bool:
        if token == self.potential.eos:
            return await self.condition.complete(context) > NEG_INF
        return await self.condition.prefix(context + [token]) > NEG_INF

    async def sample(self, context, draw=None):
        context = list(context)
        if self.proposal is None:
            w, top = _folded_max((await self.potential.logw_next(context)).weights)
            q = w
        else:
            wl, ql = await gather_or_cancel(
                self.potential.logw_next(context), self.proposal.logw_next(context)
            )
            w, (q, top) = fold_nan(wl.weights), _folded_max(ql.weights)
        if top == NEG_INF:
            return self.potential.eos, NEG_INF, NEG_INF
        # Tokens of zero proposal weight have probability 0: never drawn, never checked.
        probs = np.exp(q - top)
        total = float(probs.sum())
        probs /= total
        log_q = top + math.log(total)
        vocab_eos = self.potential.vocab_eos
        rng = self.rng if self.rng is not None else current_rng()
        found = await self.search(context, None, probs, _Chooser(vocab_eos, draw, rng))
        if found.first is None or found.log_z == NEG_INF:
            return self.potential.eos, NEG_INF, found.logp
        index = found.first
        if self.proposal is None:
            ratio = log_q
        else:
            ratio = float(w[index] - (q[index] - log_q))
        return vocab_eos[index], ratio + found.log_z, found.logp

    async def _check_block(self, context: list, rows: np.ndarray) -> tuple[list, int]:
        """Whether each `vocab_eos` row may follow `context`, from one `allowed_next`
        call on the distinct rows; and how many were checked."""
        if len(rows) < self.vector_walk:
            block = rows.tolist()
            distinct = list(dict.fromkeys(block))
            answer = dict(zip(distinct, await self._allowed_next(context, distinct)))
            return [answer[i] for i in block], len(distinct)
        distinct, where = np.unique(rows, return_inverse=True)
        answer = np.asarray(await self._allowed_next(context, distinct), dtype=bool)
        return answer[where], len(distinct)

    async def search(self, context, support, probs, choose: _Chooser) -> Search:
        """Draw, check and remove rejects until the stopping rule; estimate `Ẑ`.

        `probs[i]` is the proposal probability of `vocab_eos[support[i]]` (of
        `vocab_eos[i]` when `support` is None). Draws come in blocks of i.i.d. draws
        from the pool as it stood at the block's start: one when the condition is
        checked token by token, `block_size` and then twice as many each time when it
        answers a set at once (`allowed_next`). Walking a block in order, a draw of a
        reject found earlier in the same block is skipped: the draws that remain are
        then, one by one, draws from the pool with every reject found so far removed,
        exactly as when each is drawn after the last one's check. Draws after the
        stopping rule are left unused. Once `race_after` rejects are found, a search
        whose draws come from a Generator asks about every live token at once and
        finishes by `_Walk.race`, which has the same law.
        """
        pool = _Pool(probs)
        walk = _Walk(self.max_accepts if self.proper_weights else 1)
        capped = self.proper_weights and self.max_rejects != float("inf")
        batched = self._allowed_next is not None and not capped
        size = self.block_size if batched else 1
        known: dict[int, bool] = {}
        checks = 0
        while walk.accepts < walk.m:
            mass = pool.mass if walk.rejects else 1.0
            if mass <= 0.0:
                break
            if capped and walk.rejects:
                walk.stream_rejects += choose.redraws(mass, int(self.max_rejects) - walk.stream_rejects)
                if walk.stream_rejects >= self.max_rejects:
                    break
            block, chosen = choose.block(pool, mass, size)
            rows = block if support is None else support[block]
            ok, n = await self._check_draws(context, block, rows, choose.tokens, known, batched)
            checks += n
            if len(block) >= self.vector_walk:
                gone = walk.vector(block, chosen, np.asarray(ok, dtype=bool), pool, mass)
            else:
                gone = walk.python(block.tolist(), chosen.tolist(), ok, pool, mass)
            walk.stream_rejects += gone
            if capped and walk.stream_rejects >= self.max_rejects:
                break
            if batched and choose.draw is None and walk.rejects >= self.race_after and walk.accepts < walk.m:
                checks += await self._race(context, support, pool, walk, choose)
                break
            size = min(2 * size, self.max_block) if batched else 1
        z = self._estimate(walk, choose)
        log_z = math.log(z) if z > 0 else NEG_INF
        return Search(walk.first, log_z, choose.logp, checks + len(known))

    async def _check_draws(
        self, context: list, block: np.ndarray, rows: np.ndarray, tokens: list, known: dict, batched: bool
    ) -> tuple[list, int]:
        """Whether each draw of `block` (`vocab_eos` rows `rows`) is allowed, and how many
        tokens one `allowed_next` call checked for it; token by token, the one draw's
        answer is memoized in `known`, whose size counts those checks."""
        if batched:  # a reject is never drawn again: check every distinct draw
            return await self._check_block(context, rows)
        i = int(block[0])
        if i not in known:
            known[i] = await self._allowed(context, tokens[int(rows[0])])
        return [known[i]], 0

    async def _race(self, context, support, pool: _Pool, walk: _Walk, choose: _Chooser) -> int:
        """Ask about every live token at once and finish the walk by `_Walk.race`;
        return the number of checks."""
        live = pool.live_indices()
        if not len(live):
            return 0
        ok = await self._allowed_next(context, live if support is None else support[live])
        walk.race(live, np.asarray(ok, dtype=bool), pool, choose)
        walk.stream_rejects = walk.rejects
        return len(live)

    def _estimate(self, walk: _Walk, choose: _Chooser) -> float:
        """`Ẑ` of a finished walk (see the module docstring)."""
        if walk.first is None:
            return 0.0
        if not self.proper_weights:
            return walk.first_mass
        m, rejects, masses = self.max_accepts, walk.rejects, walk.masses
        if self.max_rejects != float("inf"):
            return truncated_estimate(walk.accepts, walk.stream_rejects, m, int(self.max_rejects))
        if rejects == 0:  # every mass is 1: both estimates are exactly 1
            return 1.0
        if self.n_monte_carlo_samples is not None and choose.draw is None:
            return monte_carlo_estimate(choose.rng, m, rejects, np.array(masses), self.n_monte_carlo_samples)
        return rao_blackwell_estimate(m, rejects, np.array(masses))

    def cleanup(self) -> None:
        for p in (self.potential, self.condition, self.proposal):
            if p is not None:
                p.cleanup()

    def __repr__(self) -> str:
        return f"AWRS({self.potential!r}, {self.condition!r}, max_accepts={self.max_accepts})"


__all__ = [
    "AWRS",
    "Search",
    "haldane_estimate",
    "monte_carlo_estimate",
    "rao_blackwell_estimate",
    "truncated_estimate",
]
