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
from genlm.control.sampler.token import TokenSampler
from genlm.control.weights import NEG_INF, fold_nan
from genlm.control.window import gather_or_cancel

# Math ---------------------------------------------------------------------


def haldane_estimate(m: int, rejects: int) -> float:
    """Unbiased estimate of an acceptance rate from `rejects` failures before the
    `m`-th success: `(m-1)/(m-1+K)` for `m ≥ 2`, `[K = 0]` for `m = 1`."""
    if m == 1:
        return 1.0 if rejects == 0 else 0.0
    return (m - 1) / (m - 1 + rejects)


def truncated_estimate(accepts: int, rejects: int, m: int, max_rejects: int) -> float:
    """Unbiased acceptance-rate estimate of the plan "stop at `m` successes or
    `max_rejects` failures": `(m-1)/(m-1+K)` at `m` successes, `a/(a+K_max-1)` at
    `a < m` successes and `K_max` failures."""
    if accepts >= m:
        return haldane_estimate(m, rejects)
    if accepts == 0:
        return 0.0
    return accepts / (accepts + max_rejects - 1)


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)
_GRIDS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


def _grid(panels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Composite 16-point Gauss-Legendre on `panels` panels of width 4 covering
    `[-4·panels, 0]`: nodes `v`, `log(1 - e^v)`, `e^v` and weights (built once)."""
    grid = _GRIDS.get(panels)
    if grid is None:
        v = (4.0 * (np.arange(panels)[:, None] - panels) + 2.0 * (_GL_NODES[None, :] + 1.0)).ravel()
        u = np.exp(v)
        grid = (v, np.log1p(-u), u, np.tile(2.0 * _GL_WEIGHTS, panels))
        _GRIDS[panels] = grid
    return grid


def rao_blackwell_estimate(m: int, rejects: int, unknown_mass: np.ndarray) -> float:
    """`E[(m-1)/(m-1+r+Σ_j G_j)]` over independent `G_j ~ Geometric(s_j)` (failures
    before a success of probability `s_j = unknown_mass[j]`):

        (m-1) ∫₀¹ t^(m-2+r) Π_j s_j / (1-(1-s_j) t) dt
          = (m-1) ∫₀¹ (1-u)^(m-2+r) Π_j 1 / (1 + c_j u) du,   c_j = (1-s_j)/s_j.

    The second form is integrated over `v = log u` (each factor is a logistic step
    in `v` at `-log c_j`) by composite 16-point Gauss-Legendre on panels of width 4
    down to `v ≤ log(min s) - 40`; below it the integrand is 1 to first order.
    """
    if m == 1:
        return 1.0 if rejects == 0 else 0.0
    s = np.asarray(unknown_mass, dtype=np.float64)
    s = s[s < 1.0]
    power = m - 2 + rejects
    if s.size == 0:
        return (m - 1) / (m - 1 + rejects)
    panels = int(math.ceil((40.0 - min(math.log(float(s.min())), 0.0)) / 4.0))
    v, log1m_u, u, weights = _grid(panels)
    log_f = v + power * log1m_u - _log_factors((1.0 - s) / s, u)
    return (m - 1) * (float(weights @ np.exp(log_f)) + math.exp(-4.0 * panels))


def _log_factors(c: np.ndarray, u: np.ndarray) -> np.ndarray:
    """`Σ_j log(1 + c_j u)` at each node `u ≤ 1` (ascending).

    Many factors: at the nodes where every `c_j u ≤ 1e-3` the sum is the series
    `Σ_n (-1)^(n+1) S_n u^n / n` in the power sums `S_n = Σ_j c_j^n`, cut after six
    terms (the rest is below `J·1e-21`); at the others the factors are multiplied
    in groups whose products stay below 1e250 before one log per group (the log of
    a rounded product is off by at most a few ulps per factor).
    """
    if len(c) < 32:
        return np.log1p(c[:, None] * u[None, :]).sum(axis=0)
    top = float(c.max())
    out = np.empty(len(u))
    k = int(np.searchsorted(u, 1e-3 / top, side="right")) if top > 0 else len(u)
    if k:  # in y = u·max c ≤ 1e-3 and the power sums of c / max c (no overflow)
        powers = np.cumprod(np.broadcast_to(c / top, (6, len(c))), axis=0).sum(axis=1)
        y = u[:k] * top
        series = powers[5] / 6
        for n in (5, 4, 3, 2, 1):
            series = powers[n - 1] / n - y * series
        out[:k] = y * series
    if k < len(u):
        g = max(int(250.0 / max(math.log10(1.0 + top), 1.0)), 1)
        groups = -(-len(c) // g)
        padded = np.zeros(groups * g)
        padded[: len(c)] = c
        factors = 1.0 + padded[:, None] * u[None, k:]
        out[k:] = np.log(factors.reshape(groups, g, len(u) - k).prod(axis=1)).sum(axis=0)
    return out


def monte_carlo_estimate(
    rng: np.random.Generator, m: int, rejects: int, unknown_mass: np.ndarray, n: int
) -> float:
    """An unbiased Monte Carlo version of `rao_blackwell_estimate` from `n` draws of the
    skipped redraws."""
    if m == 1:
        return 1.0 if rejects == 0 else 0.0
    s = np.asarray(unknown_mass, dtype=np.float64)
    s = s[s < 1.0]
    hidden = rng.geometric(s[None, :], size=(n, s.size)).sum(axis=1) - s.size if s.size else 0
    return float(np.mean((m - 1) / (m - 1 + rejects + np.asarray(hidden, dtype=np.float64))))


# Search --------------------------------------------------------------------


def _folded_max(x: np.ndarray) -> tuple[np.ndarray, float]:
    """`fold_nan(x)` and its maximum (-inf when empty), in one pass when `x` is
    NaN-free and below +inf."""
    x = np.asarray(x, dtype=np.float64)
    top = float(x.max()) if x.size else NEG_INF
    if not top < np.inf:  # NaN or +inf
        x = fold_nan(x)
        top = float(x.max())
    return x, top


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


def _cumsum(x: np.ndarray) -> np.ndarray:
    """`np.cumsum(x)` of a float64 vector, by torch's scan (4× faster on CPU)."""
    import torch

    return torch.from_numpy(x).cumsum(0).numpy()


class _Pool:
    """The proposal over the vocabulary with the known rejects removed.

    A draw maps a uniform `u` on the remaining mass to the CDF of `probs` by skipping
    the removed entries: with the removed indices `r_1 < ... < r_k` and `S_j` the
    probability of the first `j`, the removed entries collapse to the points
    `a_j = cdf[r_j] - S_j` of the remaining axis, so `u` sits at `u + S_j` on the
    original axis, `j = #{a_j ≤ u}`. A draw costs `O(k + log V)`; after `fold_at` (64)
    removals, or before a block of as many draws, the removals are folded into a
    fresh CDF (`O(V)`), so `k` stays small.
    """

    fold_at = 64

    def __init__(self, probs: np.ndarray):
        self.probs = probs
        self.base = probs  # probs with the folded removals zeroed
        self.cdf = _cumsum(probs)
        self.total = float(self.cdf[-1])
        self.removed: list[int] = []  # removed since the last fold, sorted
        self.removed_mass = 0.0
        self.alive: np.ndarray | None = None  # probs > 0 less the removals, from the first
        self.live = -1  # live entries, counted at the first removal

    @property
    def mass(self) -> float:
        """The proposal mass not yet removed."""
        return max(self.total - self.removed_mass, 0.0) if self.live else 0.0

    def remove(self, i: int) -> None:
        self.remove_many([i])

    def remove_many(self, indices: list[int], removed_mass: float | None = None) -> None:
        """Remove distinct live entries (`removed_mass`: the mass removed in all, when
        the caller has summed it)."""
        if not indices:
            return
        if self.alive is None:
            self.alive = self.probs > 0
            self.live = int(np.count_nonzero(self.alive))
        self.removed = sorted(self.removed + indices)
        if removed_mass is None:
            removed_mass = self.removed_mass + float(self.probs[indices].sum())
        self.removed_mass = removed_mass
        self.alive[indices] = False
        self.live -= len(indices)
        if len(self.removed) >= self.fold_at:
            self.fold()

    def fold(self) -> None:
        """Zero the removed entries in a fresh CDF."""
        if self.removed:
            self.base = self.base.copy() if self.base is self.probs else self.base
            self.base[self.removed] = 0.0
            self.cdf = _cumsum(self.base)
            self.removed = []

    def live_indices(self) -> np.ndarray:
        return np.flatnonzero(self.probs > 0 if self.alive is None else self.alive)

    def locate_many(self, u: np.ndarray) -> np.ndarray:
        """The entries at positions `u` (each in `[0, mass)`) of the remaining mass."""
        return self.draw(u)[0]

    def draw(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`locate_many(u)` and the entries' probabilities."""
        if len(u) >= self.fold_at:
            self.fold()
        x = u
        if self.removed:
            r = np.array(self.removed)
            s = np.cumsum(self.probs[r])
            j = np.searchsorted(self.cdf[r] - s, u, side="right")
            x = u + np.concatenate(([0.0], s))[j]
        i = np.minimum(np.searchsorted(self.cdf, x, side="right"), len(self.probs) - 1)
        chosen = self.probs[i]
        if self.alive is None and chosen.min() > 0:
            return i, chosen
        stray = chosen <= 0 if self.alive is None else ~self.alive[i]
        if stray.any():  # rounding at a boundary: the nearest live entry
            live = self.live_indices()
            for k in np.flatnonzero(stray):
                i[k] = live[np.argmin(np.abs(live - i[k]))]
            chosen = self.probs[i]
        return i, chosen

    def locate(self, u: float) -> int:
        """The entry at position `u ∈ [0, mass)` of the remaining mass."""
        return int(self.locate_many(np.array([u], dtype=np.float64))[0])


class _Chooser:
    """The random choices of one search: through `draw`, or from a Generator."""

    def __init__(self, tokens: list, draw: Any, rng: np.random.Generator):
        self.tokens, self.draw, self.rng = tokens, draw, rng
        self.logp = 0.0

    def block(self, pool: _Pool, mass: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        """`k` independent draws from the pool as it is now (its mass is `mass`):
        their positions and proposal probabilities."""
        probs = pool.probs
        if self.draw is not None:
            live = pool.live_indices()
            options = {self.tokens[i]: float(probs[i] / mass) for i in live}
            where = {self.tokens[i]: int(i) for i in live}
            picks = np.array([where[self.draw(options)] for _ in range(k)], dtype=np.intp)
            chosen = probs[picks]
        else:
            picks, chosen = pool.draw(self.rng.random(k) * pool.mass)
        self.logp += float(np.log(chosen).sum()) - k * math.log(mass)
        return picks, chosen

    def redraws(self, s: float, budget: int) -> int:
        """Skipped redraws of known rejects: `Geometric(s)` failures, capped at `budget`."""
        if self.draw is not None:
            options = {g: s * (1.0 - s) ** g for g in range(budget)}
            options[budget] = (1.0 - s) ** budget
            g = self.draw(options)
            self.logp += math.log(options[g])
            return g
        g = min(int(self.rng.geometric(s)) - 1, budget)
        self.logp += math.log((1.0 - s) ** g * (s if g < budget else 1.0))
        return g


class _Walk:
    """The tallies of a search's walk through its draws, block by block.

    Within a block a reject drawn again after its first draw is skipped; the walk
    stops at the `m`-th accept. `masses` holds the proposal mass not yet known to be
    rejected at each counted draw (1 exactly before the first reject).
    """

    def __init__(self, m: int):
        self.m = m
        self.accepts = self.rejects = self.stream_rejects = 0
        self.first: int | None = None
        self.first_mass = 1.0
        self.masses: list[float] = []

    def python(self, block: list, chosen: list, ok: list, pool: _Pool, mass: float) -> int:
        """Walk a block draw by draw; remove the rejects found from the pool and
        return how many there were."""
        found: dict[int, None] = {}
        masses, accepts, m = self.masses, self.accepts, self.m
        gone = pool.removed_mass
        for i, p, allowed in zip(block, chosen, ok):
            if allowed:
                masses.append(mass)
                accepts += 1
                if self.first is None:
                    self.first, self.first_mass = i, mass
                if accepts >= m:
                    break
            elif i not in found:
                masses.append(mass)
                found[i] = None
                gone += p
                mass = max(pool.total - gone, 0.0)
        self.accepts = accepts
        self.rejects += len(found)
        pool.remove_many(list(found), gone)
        return len(found)

    def vector(
        self, block: np.ndarray, chosen: np.ndarray, ok: np.ndarray, pool: _Pool, mass: float
    ) -> int:
        """`python` in a few array passes."""
        counted = ok.copy()
        counted[np.unique(block, return_index=True)[1]] = True  # and first draws of rejects
        hits = np.flatnonzero(ok)
        need = self.m - self.accepts
        if len(hits) >= need:
            counted[hits[need - 1] + 1 :] = False
        at = np.flatnonzero(counted)
        allowed = ok[at]
        lost = np.where(allowed, 0.0, chosen[at])
        seen = np.cumsum(~allowed)  # rejects among the counted draws so far
        left = np.maximum(pool.total - (pool.removed_mass + np.cumsum(lost)), 0.0)
        before = np.empty(len(at))
        before[0] = mass
        before[1:] = np.where(seen[:-1] > 0, left[:-1], mass)
        self.masses.extend(before.tolist())
        if self.first is None and allowed.any():
            k = int(np.argmax(allowed))
            self.first, self.first_mass = int(block[at[k]]), float(before[k])
        self.accepts += int(np.count_nonzero(allowed))
        gone = block[at[~allowed]].tolist()
        self.rejects += len(gone)
        pool.remove_many(gone)
        return len(gone)

    def race(self, live: np.ndarray, ok: np.ndarray, pool: _Pool, choose: "_Chooser") -> None:
        """Finish the walk at once, knowing which live entries are allowed.

        From here the draws form a race of exponential clocks (the stream of draws
        as a Poisson process): each live reject `i` is first drawn at `T_i ~
        Exp(q_i)`, accepts arrive at rate `a = q(allowed)`, and the next event is a
        given reject with probability `q_i / mass` and an accept with `a / mass`,
        as for a draw from the pool. The walk ends at the `m`-th accept: the rejects
        counted are those with `T_i` before it, in the order of their clocks; the
        first accepted token (if none yet) is drawn in proportion to `q` over the
        allowed entries. All draws come from the Chooser's Generator.
        """
        rng, probs = choose.rng, pool.probs
        allowed, rejected = live[ok], live[~ok]
        weights = probs[allowed]
        a = float(weights.sum())
        q = probs[rejected]
        need = self.m - self.accepts
        clocks = rng.standard_exponential(len(rejected)) / q
        if a > 0:
            arrivals = np.cumsum(rng.standard_exponential(need)) / a
            hit = np.flatnonzero(clocks < arrivals[-1])
        else:  # no accept is left: every reject is found
            arrivals = np.empty(0)
            hit = np.arange(len(rejected))
        order = hit[np.argsort(clocks[hit], kind="stable")]
        lost = q[order]
        # ends[x]: the mass not known to be rejected once x more rejects are found
        ends = np.empty(len(order) + 1)
        ends[0] = pool.mass if self.rejects else 1.0
        ends[1:] = np.maximum(pool.total - (pool.removed_mass + np.cumsum(lost)), 0.0)
        at_accepts = ends[np.searchsorted(clocks[order], arrivals)]
        self.masses.extend(ends[:-1].tolist())
        self.masses.extend(at_accepts.tolist())
        with np.errstate(divide="ignore"):
            logp = float(np.log(lost).sum() - np.log(ends[:-1]).sum())
            if len(arrivals):
                logp += float(len(arrivals) * math.log(a) - np.log(at_accepts).sum())
        if self.first is None and len(arrivals):
            k = int(np.searchsorted(np.cumsum(weights), rng.random() * a, side="right"))
            self.first = int(allowed[min(k, len(allowed) - 1)])
            self.first_mass = float(at_accepts[0])
            logp += math.log(float(probs[self.first]) / a)
        choose.logp += logp
        self.accepts += len(arrivals)
        self.rejects += len(order)


# Sampler -------------------------------------------------------------------


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
            if batched:  # a reject is never drawn again: check every distinct draw
                ok, n = await self._check_block(context, rows)
                checks += n
            else:
                i = int(block[0])
                if i not in known:
                    known[i] = await self._allowed(context, choose.tokens[int(rows[0])])
                ok = [known[i]]
            if len(block) >= self.vector_walk:
                gone = walk.vector(block, chosen, np.asarray(ok, dtype=bool), pool, mass)
            else:
                gone = walk.python(block.tolist(), chosen.tolist(), ok, pool, mass)
            walk.stream_rejects += gone
            if capped and walk.stream_rejects >= self.max_rejects:
                break
            if batched and choose.draw is None and walk.rejects >= self.race_after and walk.accepts < walk.m:
                live = pool.live_indices()
                if len(live):
                    ok = await self._allowed_next(context, live if support is None else support[live])
                    checks += len(live)
                    walk.race(live, np.asarray(ok, dtype=bool), pool, choose)
                    walk.stream_rejects = walk.rejects
                break
            size = min(2 * size, self.max_block) if batched else 1
        z = self._estimate(
            walk.first, walk.accepts, walk.rejects, walk.stream_rejects, walk.first_mass, walk.masses, choose
        )
        log_z = math.log(z) if z > 0 else NEG_INF
        return Search(walk.first, log_z, choose.logp, checks + len(known))

    def _estimate(self, first, accepts, rejects, stream_rejects, first_mass, masses, choose):
        if first is None:
            return 0.0
        if not self.proper_weights:
            return first_mass
        m = self.max_accepts
        if self.max_rejects != float("inf"):
            return truncated_estimate(accepts, stream_rejects, m, int(self.max_rejects))
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
