"""Adaptive weighted rejection sampling (AWRS) of the next token under a Boolean condition.

Target: `t(x) = w(x) · c(x)`, where `w = potential.logw_next(ctx)` and `c ∈ {0, 1}` is a
Boolean condition whose vocabulary may be a subset of the potential's (tokens outside
it have `c = 0`, as in `potential * condition`). With `q` the normalized proposal (the
potential by default) on the condition's tokens and `A` the allowed set, a properly
weighted pair is an exact draw `x ~ q(· | A)` with weight `w(x)/q(x) · Ẑ`, `E[Ẑ | x] =
q(A)` (Lipkin et al. 2025, "Fast Controlled Generation from Language Models with
Adaptive Weighted Rejection Sampling"). Three paths, by what the condition tells cheaply:

1. Exact. A condition that declares `cheap_logw_next` (an engine token mask, a cached
   automaton row) gives its whole row: `x ~ q(· | A)` and `Ẑ = q(A)` exactly, the law
   and the weights of `DirectTokenSampler(potential * condition)`.
2. Enumerated. When the proposal's support on the condition's tokens has at most
   `enumerate_at` tokens, all are checked in one batched call, and then as in 1.
3. Search. Otherwise the search draws tokens from `q` without replacement (the arrival
   order of an exponential race: token `i` arrives at `T_i ~ Exp(q_i)`), checks each,
   and stops at the `m`-th accept (`m = max_accepts`), the `max_rejects`-th reject, or
   when every token was checked. The first `m - 1` accepts `i` (all of them at a
   reject-cap stop) get the Horvitz-Thompson weight of the race, averaged over its
   unobserved times given the order (Rao-Blackwell; see `_awrs_estimates`):

       φ_i = E[q_i / (1 - exp(-q_i τ))],   τ = Σ_{j ≤ L} E_j / M_j,

   with `M_j` the mass not yet drawn before the j-th draw and `L` the stopping draw;
   `φ_i = q_i` when every token was checked (`τ = ∞`). `x` is one of them, drawn
   ∝ `φ_i`, and `Ẑ = Σ_i φ_i`: unbiased since `i` is among them iff `T_i` precedes the
   `(m-1)`-th other accept (or the cap-th reject), a time that does not depend on
   `T_i`. A search that checked everything is exact, so the weight does not blow up
   where one rare allowed token hides among thousands of rejects. `max_accepts = 1`
   gives `Ẑ = [the first draw was allowed]`; `proper_weights=False` stops at the first
   accept and returns the weight 1 (exact token, biased weight, as in 0.4.1).

With `estimator="recursive"` the search stops instead at the draw after the first
accept `x` and uses the AWRS paper's recursive estimator, `Ẑ = q_x + (M - q_x) ·
[next draw allowed]`; its proof and the put-back coin are in
`genlm.control.sampler._awrs_search`. The race estimator stays the default (its tail
is lighter where the allowed mass is small and spread).

When the condition answers a set of tokens in one call (`allowed_next`), draws are
checked in blocks and a long search finishes by the race over the remaining tokens;
both leave the law above unchanged (see `AWRS.search`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import numpy as np

from genlm.control._args import is_int, is_real, reject_bool
from genlm.control._cleanup import Cleaned, cleaned
from genlm.control._device import is_tensor, mask_like, masked
from genlm.control._warn import warn_user
from genlm.control.draw import context_rng, current_rng, draw_from, draw_many, using_rng
from genlm.control.potential import fast_paths
from genlm.control.potential.base import Potential
from genlm.control.potential.product import Product
from genlm.control.sampler._awrs_checks import CheckMemo, Checks, TrieIndex
from genlm.control.sampler._awrs_device import race_on_device, search_on_device
from genlm.control.sampler._awrs_exact import (
    Support,
    draw_one,
)
from genlm.control.sampler._awrs_rows import allowed_rows, mask_of, on_host, proposal_rows
from genlm.control.sampler._awrs_search import (
    _Chooser,
    _folded_max,
    _Pool,
    _Walk,
    estimate,
    skip_coin,
)
from genlm.control.sampler.budget import Budget, budget_of
from genlm.control.sampler.token import TokenSampler
from genlm.control.weights import NEG_INF, fold_nan
from genlm.control.window import gather_or_cancel


class Search(NamedTuple):
    """The outcome of one adaptive rejection search over the proposal's support.

    Attributes:
        first: support position of the returned accepted token (None: none accepted).
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
        condition: a Boolean potential (`prefix`, `complete` and `logw_next` are 0 or
            -inf, and 0 at the contexts sampled from) whose vocabulary is the
            potential's or a subset of it (e.g. a pruned coercion); a token `x` is
            allowed when `condition.prefix(ctx + [x]) > -inf`, EOS when
            `condition.complete(ctx) > -inf`. A condition with `cheap_logw_next` is
            read whole (exact weights); one with an async `allowed_next(ctx, indices)`
            (the answers for the tokens at `indices` of its `vocab_eos` in one call)
            has its draws checked in blocks.
        seed: makes the sampler's draws a function of `seed` too. Outside SMC (and
            outside `using_rng`) draws come from this sampler's own Generator, seeded
            with `seed`; inside a run each draw's generator is derived from `seed` and
            the particle's stream, so it composes with `smc(..., seed=)` instead of
            replacing it. Without `seed`, draws use `genlm.control.draw.current_rng()`.
        prune_logws: kept for compatibility: tokens of zero proposal weight are never
            drawn nor checked.
        proper_weights: return the unbiased weight (see the module docstring);
            when False, stop at the first accept and return log weight 0 (`-inf`
            when no token was accepted within `max_rejects` draws), as 0.4.1 did:
            an exact draw from the proposal restricted to the allowed tokens, with
            no weight of the potential's mass or the proposal's correction.
        max_accepts: the search stops at this many accepts `m ≥ 1`.
        max_rejects: the search stops at this many rejects (`inf`: none); bounds the
            condition checks of a search at the price of a zero weight when no
            token was accepted before.
        n_monte_carlo_samples: estimate each `φ_i` from this many simulations of the
            race's times instead of the exact series (ignored when `draw` is given).
        estimator: the search's estimate of the allowed mass: `"race"` (default,
            Horvitz-Thompson over the race, the lighter tail) or `"recursive"` (the
            AWRS paper's: the search stops one draw past the first accept, fewer
            condition checks, a heavy tail where the allowed mass is small; it takes
            no `max_rejects`, `n_monte_carlo_samples` or `max_accepts` other than 2).
        proposal: optional potential to draw from instead of `potential`, over a
            vocabulary that holds the condition's; it must be positive wherever
            `potential * condition` is.
        autobatch: serve the particles' concurrent calls as batches.

    Raises:
        TypeError: an argument that is not a Potential.
        ValueError: a condition token missing from the potential's (or the
            proposal's) vocabulary, `max_accepts < 1`, `max_rejects < 1`,
            `n_monte_carlo_samples < 1`; while sampling, a condition value that is
            neither 0 nor -inf.
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
        estimator: str = "race",
    ):
        for name, value in (("potential", potential), ("condition", condition), ("proposal", proposal)):
            if not (value is None and name == "proposal") and not isinstance(value, Potential):
                raise TypeError(f"AWRS {name} must be a Potential, got {type(value).__name__}")
        for name, value in (
            ("max_accepts", max_accepts),
            ("max_rejects", max_rejects),
            ("n_monte_carlo_samples", n_monte_carlo_samples),
        ):
            reject_bool(name, value)
        if not is_int(max_accepts) or max_accepts < 1:
            raise ValueError(f"max_accepts must be an integer ≥ 1, got {max_accepts!r}")
        if max_rejects != float("inf") and not (is_real(max_rejects) and int(max_rejects) == max_rejects and max_rejects >= 1):
            raise ValueError(f"max_rejects must be an integer ≥ 1 or inf, got {max_rejects!r}")
        if n_monte_carlo_samples is not None and (not is_int(n_monte_carlo_samples) or n_monte_carlo_samples < 1):
            raise ValueError(
                f"n_monte_carlo_samples must be an integer ≥ 1 or None, got {n_monte_carlo_samples!r}"
            )
        self.support = Support(potential, condition, proposal)

        def view(p):
            return None if p is None else (p.to_autobatched() if autobatch else p)

        self.potential, self.condition, self.proposal = view(potential), view(condition), view(proposal)
        self.autobatch = autobatch
        self.seed = seed
        self.rng = None if seed is None else np.random.default_rng(seed)
        # two words of the seed, mixed with each particle's stream in `_composed`
        self._seed_key = None if seed is None else np.random.default_rng(seed).integers(0, 2**63, size=2).tolist()
        self.prune_logws = prune_logws
        self.proper_weights = proper_weights
        self.max_accepts = int(max_accepts)
        # the recursive estimator: one coin flip after the first accept (module docstring)
        if estimator not in ("race", "recursive"):
            raise ValueError(f"estimator must be 'race' or 'recursive', got {estimator!r}")
        if estimator == "recursive" and (
            self.max_accepts != 2 or max_rejects != float("inf") or n_monte_carlo_samples is not None
        ):
            raise ValueError(
                "the recursive estimator takes max_accepts=2, no max_rejects and no "
                "n_monte_carlo_samples"
            )
        self.estimator = estimator
        self.recursive = proper_weights and estimator == "recursive"
        self.max_rejects = max_rejects
        self.n_monte_carlo_samples = n_monte_carlo_samples
        if n_monte_carlo_samples is not None:
            # 0.4.1 code that passes it expects this warning (it did nothing there)
            warn_user(
                "n_monte_carlo_samples was deprecated in genlm-control 0.4.1, where it did "
                "nothing; here each inclusion probability is estimated from that many "
                "simulations of the race instead of the exact series",
                DeprecationWarning,
            )
        self.exact = bool(condition.cheap_logw_next)
        self._like: Any = None  # an empty array of the latest rows' kind and device
        self._allowed_next = fast_paths.allowed_next(condition)
        self._batch_allowed = fast_paths.batch_allowed(condition)
        trie = fast_paths.token_trie(condition)
        index = None if trie is None else TrieIndex(trie, view(trie.inner))
        # the condition's answers, kept per context (genlm.control.sampler._awrs_checks)
        self._memo = CheckMemo(self._allowed_next, index)
        with warnings.catch_warnings():  # a subset vocabulary is intended here
            warnings.simplefilter("ignore")
            super().__init__(Product(self.potential, self.condition))
        self.vocab_eos_set = set(self.target.vocab_eos)  # 0.4.1's attribute

    # Supports of at most this many tokens are checked whole, in one batched call, and
    # drawn exactly: a search checks at least `max_accepts` tokens one await at a time,
    # and where the allowed mass is small it checks most of the support anyway.
    enumerate_at = 16
    block_size = 8  # draws checked together when the condition has `allowed_next`
    max_block = 4096  # the longest block
    vector_walk = 64  # blocks at least this long are walked in numpy
    race_after = 16  # rejects after which a Generator-driven search finishes by `_Walk.race`
    device_block = 64  # arrivals per row in a tensor-row step's first read-back (_awrs_device)
    device_race = None  # the search's race drawn on the rows' device; None: off the CPU only

    # Rows (genlm.control.sampler._awrs_rows) ------------------------------------

    async def _rows(self, contexts: list[list], fold: bool = True) -> tuple[Any, Any]:
        return await proposal_rows(self.potential, self.proposal, self.support, contexts, fold)

    async def _budget_rows(self, contexts: list[list]) -> tuple[Any, Any, Budget | None]:
        """`_rows` with the tokens that cannot end within the run's `max_tokens` set to
        `-inf` (the condition's bound, `genlm.control.sampler.budget`), and the budget."""
        (w, q), budget = await gather_or_cancel(self._rows(contexts), budget_of(self.condition, contexts))
        if budget is None or not budget.prunes:  # nothing out of budget: no mask to apply
            return w, q, budget
        ok = mask_like(budget.ok, w)
        w, q = (masked(ok, w),) * 2 if q is w else (masked(ok, w), masked(ok, q))
        return w, q, budget

    async def _allowed_rows(self, contexts: list[list], like: Any) -> Any:
        return await allowed_rows(self.condition, self._batch_allowed, contexts, like)

    def _rng(self) -> np.random.Generator:
        """The particle's stream (composed with `seed`); outside a run `self.rng`."""
        stream = context_rng()
        if stream is None:
            return self.rng if self.rng is not None else current_rng()
        return self._composed(stream)

    def _composed(self, stream: np.random.Generator) -> np.random.Generator:
        """`stream` without `seed`; with it, a generator seeded by two words of the
        seed and two drawn from `stream`, a function of both."""
        if self._seed_key is None:
            return stream
        return np.random.default_rng([*self._seed_key, *stream.integers(0, 2**63, size=2).tolist()])

    async def _exact(self, w: Any, q: Any, allowed: Any, draw: Any) -> tuple:
        """An exact draw from `q` restricted to `allowed`, weighed under `w`."""
        target = self.condition.make_lazy_weights(masked(allowed, w))
        if self.proposal is None:
            d = await (draw_one(target, None, self._rng()) if draw is None else draw_from(target, draw=draw))
        else:
            rows = self.condition.make_lazy_weights(masked(allowed, q))
            d = await (draw_one(rows, target, self._rng()) if draw is None else draw_from(rows, draw=draw, target=target))
        return d.token, d.logw, d.logp

    # Sampling ------------------------------------------------------------------

    def ending_factors(self) -> list[Potential]:
        """`[potential]`: the condition prices nothing, and the potential's EOS entry
        is the price of ending (SMC's default end twist)."""
        return [self.potential]

    async def sample(self, context, draw=None):
        context = list(context)
        w, q, budget = await self._budget_rows([context])
        if self.exact:
            allowed = await self._allowed_rows([context], w)
            out = await self._exact(w[0], q[0], allowed[0], draw)
        elif draw is None and race_on_device(self, q):
            out = (await search_on_device(self, [context], w, q, [self._rng()]))[0]
        else:
            w, q = on_host(w, q)
            out = await self._search_row(context, w[0], q[0], draw)
        return self._improper(out if budget is None else (out[0], budget.weight(0, out[1]), out[2]))

    def _improper(self, out: tuple) -> tuple:
        """`out`, with the log weight 0 of an accepted token (`-inf` of none) when
        `proper_weights` is False."""
        if self.proper_weights:
            return out
        return out[0], 0.0 if out[1] > NEG_INF else NEG_INF, out[2]

    async def _search_row(self, context: list, w: np.ndarray, q: np.ndarray, draw: Any) -> tuple:
        """`sample` from host rows: the small-support check or the search."""
        q, top = _folded_max(q)
        if top == NEG_INF:
            return self.condition.eos, NEG_INF, NEG_INF
        probs = np.exp(q - top)
        total = float(probs.sum())
        probs /= total
        live = np.flatnonzero(probs > 0)
        if len(live) <= self.enumerate_at:
            allowed = np.zeros(len(probs), dtype=bool)
            allowed[live] = await self._check_all(context, live)
            return await self._exact(w, q, allowed, draw)
        log_q = top + math.log(total)
        found = await self.search(context, probs, _Chooser(self.support.tokens, draw, self._rng()))
        if found.first is None or found.log_z == NEG_INF:
            return self.condition.eos, NEG_INF, found.logp
        index = found.first
        ratio = log_q if self.proposal is None else float(w[index] - (q[index] - log_q))
        return self.support.tokens[index], ratio + found.log_z, found.logp

    async def batch_sample(self, contexts, rngs):
        """One `batch_logw_next` of the potential (and proposal) for the batch. With a
        `cheap_logw_next` condition, one batch of condition masks (on the rows' device)
        and one stacked draw (one read-back); otherwise the rows come to the host in
        one read-back and each context's search runs on them, concurrently; on tensor
        rows off the CPU (`device_race`) the searches' race is drawn on the rows'
        device and only the arrivals walked are read back
        (`genlm.control.sampler._awrs_device`)."""
        if not self.autobatch or type(self).sample is not AWRS.sample:
            return await super().batch_sample(contexts, rngs)
        if not contexts:
            return []
        if self.exact:
            w, q, budget, allowed = await self._exact_rows(contexts)
            out = await self._exact_draws(rngs, w, q, allowed)
        else:
            w, q, budget = await self._budget_rows(contexts)
            out = await self._batch_draws(contexts, rngs, w, q)
        if budget is not None:
            out = [(t, budget.weight(i, logw), logp) for i, (t, logw, logp) in enumerate(out)]
        return [self._improper(d) for d in out]

    async def _batch_draws(self, contexts: list[list], rngs: list, w: Any, q: Any) -> list[tuple]:
        """`batch_sample` from the rows `w` and `q` of the batch."""
        if not self.exact and race_on_device(self, q):
            return await search_on_device(self, contexts, w, q, [self._composed(r) for r in rngs])
        if not self.exact:
            w, q = on_host(w, q)

            async def one(i: int) -> tuple:
                # the search composes the particle's stream with `seed` (`_rng`)
                with using_rng(rngs[i]):
                    return await self._search_row(contexts[i], w[i], q[i], None)

            return await gather_or_cancel(*(one(i) for i in range(len(contexts))))
        return await self._exact_draws(rngs, w, q, await self._allowed_rows(contexts, w))

    async def _exact_rows(self, contexts: list[list]) -> tuple[Any, Any, Budget | None, Any]:
        """`(w, q, budget, allowed)` of the exact path. The budget's mask is applied
        once: to the rows on a device (as `_budget_rows`), folded into the bool
        `allowed` on the host (the draw masks the rows with it anyway, and masking
        twice with `-inf` is masking once with both)."""
        # unfolded: the stacked draw finds NaN and +inf in q, and w is read entry by entry
        rows = gather_or_cancel(self._rows(contexts, fold=False), budget_of(self.condition, contexts))
        like = self._like
        if like is None:  # the first step: the rows' kind and device are not known yet
            (w, q), budget = await rows
            allowed = await self._allowed_rows(contexts, w)
        else:  # the masks while the rows are made (a forward, off the event loop's work)
            ((w, q), budget), allowed = await gather_or_cancel(rows, self._allowed_rows(contexts, like))
            allowed = mask_of(allowed, w)
        self._like = w.new_empty(0) if is_tensor(w) else np.empty(0)
        if budget is None or not budget.prunes:
            return w, q, budget, allowed
        if is_tensor(w):
            ok = mask_like(budget.ok, w)
            w, q = (masked(ok, w),) * 2 if q is w else (masked(ok, w), masked(ok, q))
            return w, q, budget, allowed
        return w, q, budget, np.logical_and(allowed, budget.ok)

    async def _exact_draws(self, rngs: list, w: Any, q: Any, allowed: Any) -> list[tuple]:
        """One stacked draw from `q` restricted to `allowed`, weighed under `w`."""
        rngs = [self._composed(r) for r in rngs]
        # the draw restricts each row to its mask (on a tensor's device it multiplies
        # the masses by it); a target is read only at allowed tokens
        rows = self.condition.rows_to_weights
        targets = None if self.proposal is None else rows(w)
        draws = await draw_many(rows(q), rngs, targets, allowed=allowed)
        return [(d.token, d.logw, d.logp) for d in draws]

    async def logw_eos(self, context: list) -> float:
        """`target.logw_next(ctx)[EOS]` without the condition's whole row:
        `potential.logw_next(ctx)[EOS] + condition.complete(ctx) - condition.prefix(ctx)`."""
        context = list(context)
        w, done, live = await gather_or_cancel(
            self.potential.logw_next(context), self.condition.complete(context), self.condition.prefix(context)
        )
        if done == NEG_INF:
            return NEG_INF
        return float(fold_nan(np.array([w[self.potential.eos]]))[0]) + done - live

    # Checks --------------------------------------------------------------------

    def _checks(self, context: list) -> Checks:
        """The condition's answers after `context`: what earlier searches learnt there,
        and calls for the rest (`genlm.control.sampler._awrs_checks`)."""
        return self._memo.at(self.condition, context)

    async def _check_all(self, context: list, rows: np.ndarray) -> np.ndarray:
        """Whether each `vocab_eos` row of the condition may follow `context`."""
        return (await self._checks(context).answer(rows))[0]

    async def _check_block(self, context: list, rows: np.ndarray) -> tuple[np.ndarray, int]:
        """Whether each draw of a block may follow `context`, and the condition calls
        made (none for answers known already)."""
        return await self._checks(context).answer(rows)

    async def _known_prefix(self, context: list, block: np.ndarray, chosen: np.ndarray, choose: _Chooser, mass: float) -> tuple:
        """A block's draws up to its first one whose answer is not known (asked, one
        call or none), with their answers and the calls made; the draws after it
        are left unused (their probabilities leave `choose.logp`), so the walk goes
        on from the pool as it is after that draw."""
        checks = self._checks(context)
        known = checks.known_of(block)
        unknown = np.flatnonzero(known < 0)
        if not len(unknown):
            return block, chosen, known.astype(bool), 0
        cut = int(unknown[0]) + 1
        ok, n = await checks.answer(block[cut - 1 : cut])
        if cut < len(block):
            choose.logp -= float(np.log(chosen[cut:]).sum()) - (len(block) - cut) * math.log(mass)
        answers = known[:cut].astype(bool)
        answers[-1] = bool(ok[0])
        return block[:cut], chosen[:cut], answers, n

    async def search(self, context, probs, choose: _Chooser) -> Search:
        """Draw and check tokens in race order until the stopping rule; estimate `Ẑ`.

        `probs[i]` is the proposal probability of the condition's `vocab_eos[i]`.
        Draws come in blocks of i.i.d. draws from the pool as it stood at the block's
        start: one when the condition is checked token by token, `block_size` and
        then twice as many each time when it answers a set at once (`allowed_next`).
        Walking a block in order, a draw of a token drawn earlier in the same block is
        skipped: the draws that remain are then, one by one, draws from the pool with
        every token drawn so far removed, exactly as when each is drawn after the last
        one's check. Draws after the stopping rule are left unused. Once `race_after`
        rejects are found, a search whose draws come from a Generator asks about
        every remaining token at once and finishes by `_Walk.race`, which has the same
        law.
        """
        pool = _Pool(probs)
        m = self.max_accepts if self.proper_weights else 1
        walk = _Walk(m, self.max_rejects, coin=self.recursive)
        batched = self._allowed_next is not None
        # a Generator-driven search of a condition checked token by token draws in
        # blocks too, but uses a block only up to its first draw not known already
        cut_at_unknown = not batched and choose.draw is None
        size = self.block_size if batched or cut_at_unknown else 1
        checks = 0
        while not walk.done:
            if walk.coin and walk.accepts and walk.skip is None:
                # the coin draw is next: decide first whether it is needed at all
                walk.skip = skip_coin(walk, probs, choose)
                if walk.skip:
                    break
            mass = pool.mass
            if mass <= 0.0:
                break
            block, chosen = choose.block(pool, mass, size)
            if cut_at_unknown:
                block, chosen, ok, n = await self._known_prefix(context, block, chosen, choose, mass)
            else:
                ok, n = await self._check_block(context, block)
            checks += n
            if len(block) >= self.vector_walk:
                walk.vector(block, chosen, ok, pool, mass)
            else:
                walk.python(block.tolist(), chosen.tolist(), ok.tolist(), pool, mass)
            if batched and choose.draw is None and walk.rejects >= self.race_after and not walk.done:
                live = pool.live_indices()
                if len(live):
                    ok, n = await self._check_block(context, live)
                    walk.race(live, ok, pool, choose)
                    checks += n
                break
            if batched or cut_at_unknown:
                size = min(2 * size, self.max_block) if n == 0 or batched else self.block_size
        first, log_z = estimate(self, walk, probs, choose)
        return Search(first, log_z, choose.logp, checks)

    def cleanup(self) -> Cleaned:
        return cleaned(*(p.cleanup() for p in (self.potential, self.condition, self.proposal) if p is not None))

    def __repr__(self) -> str:
        return f"AWRS({self.potential!r}, {self.condition!r}, max_accepts={self.max_accepts})"


__all__ = ["AWRS", "Search"]
