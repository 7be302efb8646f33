"""The search machinery of AWRS: the proposal with the drawn tokens removed, the random
choices, and the walk that tallies a search's draws.

A draw from the pool is a draw from `q` restricted to the tokens not drawn yet,
`q(x) / M` with `M` their mass: the draws are the arrival order of an exponential
race (see `genlm.control.sampler._awrs_estimates`).

The recursive estimator (`estimator="recursive"`, the coin of `_Walk` and `skip_coin`).
With `estimator="recursive"` the search stops instead at the draw after the first
accept `x` and uses the recursive estimator of the AWRS paper: with `M` the mass not yet drawn when `x` is drawn (one minus the rejected
mass) and `z` the next draw,

    Ẑ = q_x + (M - q_x) · [z allowed]   (that is, M if z is allowed, else q_x).

It is properly weighted: for a pool `P` of mass `M` and `S(P) = Σ_{a ∈ A∩P} q_a f(a)`,
a first draw `y ∉ A` leaves the pool `P∖y`, and a first draw `y ∈ A` gives
`E[Ẑ] = q_y + (M - q_y) q(A∩P∖y)/(M - q_y) = q(A∩P)`, so by induction over pools
`E[Ẑ f(x)] = Σ_{y ∉ A} (q_y/M) S(P) + q(A∩P)/M · S(P) = S(P)`. It checks one token
past the first accept (the race estimator checks up to a second accept, which can be
far when the other allowed tokens are rare), and where one allowed token hides among
rejects it is exact (`z` is never allowed, `Ẑ = q_x`). When `x` holds at least half of
`M`, the coin is the draw of a token from the pool with `x` put back: with probability
`q_x / M` it is `x` again and nothing is checked, else it is `z`, and

    Ẑ = q_x + M · [that draw was z and z is allowed],

again with `E[Ẑ | x] = q_x + q(A∩P∖x) = q(A∩P)`; a peaked row (an LM sure of its next
token) then costs `1 - q_x/M < 1/2` checks past the first accept on average. Which
coin is used depends on `x` and `M` only, so the induction holds for the mixture.
The race estimator stays the default: the recursive one's `Ẑ = M` outcome is rare
and large where the allowed mass is small and spread over several tokens (a heavy
tail that resampling reads as noise), while the race estimator uses how much mass
was drawn before each accept.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from genlm.control.sampler._awrs_estimates import log_inclusion_estimate, monte_carlo_inclusion
from genlm.control.weights import NEG_INF, fold_nan, logsumexp

_CANCEL = 1e-3  # a running mass below this share of its total is summed afresh


def _folded_max(x: np.ndarray) -> tuple[np.ndarray, float]:
    """`fold_nan(x)` and its maximum (-inf when empty), in one pass when `x` is
    NaN-free and below +inf."""
    x = np.asarray(x, dtype=np.float64)
    top = float(x.max()) if x.size else NEG_INF
    if not top < np.inf:  # NaN or +inf
        x = fold_nan(x)
        top = float(x.max())
    return x, top


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
        """The proposal mass not yet removed; summed afresh from the live entries when
        the running difference has lost more than three digits to cancellation."""
        if not self.live:
            return 0.0
        left = self.total - self.removed_mass
        if left < _CANCEL * self.total:
            self.fold()
            return self.total
        return left

    def rest(self, extra: list) -> float:
        """The exact mass of the live entries other than `extra` (distinct, live)."""
        alive = (self.probs > 0) if self.alive is None else self.alive.copy()
        alive[extra] = False
        return float(self.probs[alive].sum())

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
        """Zero the removed entries in a fresh CDF; the live mass is its last entry."""
        if self.removed:
            self.base = self.base.copy() if self.base is self.probs else self.base
            self.base[self.removed] = 0.0
            self.cdf = _cumsum(self.base)
            self.removed = []
            self.total, self.removed_mass = float(self.cdf[-1]), 0.0

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
            picks, chosen = pool.draw(self.rng.random(k) * mass)
        self.logp += float(np.log(chosen).sum()) - k * math.log(mass)
        return picks, chosen

    def coin(self, p: float) -> bool:
        """True with probability `p`: a choice point of its own for `draw` (keys True
        and False), no choice at all when `p` is 0 or 1."""
        if p >= 1.0 or p <= 0.0:
            return p >= 1.0
        if self.draw is not None:
            heads = bool(self.draw({True: p, False: 1.0 - p}))
        else:
            heads = bool(self.rng.random() < p)
        self.logp += math.log(p if heads else 1.0 - p)
        return heads

    def pick(self, options: list[int], weights: np.ndarray) -> int:
        """One of `options` (support positions) with probability ∝ `weights`."""
        p = weights / weights.sum()
        if self.draw is not None:
            chosen = self.draw({self.tokens[i]: float(w) for i, w in zip(options, p)})
            k = next(j for j, i in enumerate(options) if self.tokens[i] == chosen)
        else:
            k = min(int(np.searchsorted(np.cumsum(p), self.rng.random(), side="right")), len(p) - 1)
        self.logp += math.log(float(p[k]))
        return options[k]


class _Walk:
    """The tallies of a search's walk through the arrival order of its draws.

    A draw of a token drawn before (earlier in the same block) is skipped, so the
    walk sees each token once, in the order of an exponential race. It stops at the
    `m`-th accept or the `cap`-th reject, and with `coin` at the draw after the first
    accept. `masses[j]` is the mass not yet drawn before the j-th draw; `accepts` and
    `rejects` hold support positions in order.
    """

    def __init__(self, m: int, cap: float, coin: bool = False):
        self.m, self.cap, self.coin = m, cap, coin
        self.skip: bool | None = None  # the recursive estimator's skipped coin draw
        self.accepts: list[int] = []
        self.accept_at: list[int] = []  # the draw (index into `masses`) of each accept
        self.rejects = 0
        self.masses: list[float] = []
        self.done = False

    def python(self, block: list, chosen: list, ok: list, pool: _Pool, mass: float) -> None:
        """Walk a block draw by draw and remove the tokens drawn from the pool."""
        seen: dict[int, None] = {}
        start = mass
        for i, p, allowed in zip(block, chosen, ok):
            if i in seen:
                continue
            self.masses.append(mass)
            seen[i] = None
            mass -= p
            if mass < _CANCEL * start:  # summed afresh: no digits lost to cancellation
                mass = start = pool.rest(list(seen))
            after_accept = self.coin and bool(self.accepts)
            if allowed:
                self.accepts.append(i)
                self.accept_at.append(len(self.masses) - 1)
            else:
                self.rejects += 1
            if len(self.accepts) >= self.m or self.rejects >= self.cap or after_accept:
                self.done = True
                break
        pool.remove_many(list(seen))

    def vector(self, block: np.ndarray, chosen: np.ndarray, ok: np.ndarray, pool: _Pool, mass: float) -> None:
        """`python` in a few array passes (falls back to it where masses cancel)."""
        first = np.sort(np.unique(block, return_index=True)[1])
        allowed = ok[first]
        stop = self._stops(allowed)
        end = int(stop[0]) + 1 if len(stop) else len(first)
        first, allowed = first[:end], allowed[:end]
        before = mass - np.concatenate(([0.0], np.cumsum(chosen[first])[:-1]))
        if before[-1] < _CANCEL * mass:
            return self.python(block.tolist(), chosen.tolist(), list(ok), pool, mass)
        self.accept_at.extend((len(self.masses) + np.flatnonzero(allowed)).tolist())
        self.masses.extend(before.tolist())
        drawn = block[first]
        self.accepts.extend(drawn[allowed].tolist())
        self.rejects += int(np.count_nonzero(~allowed))
        self.done = bool(len(stop))
        pool.remove_many(drawn.tolist())

    def _stops(self, allowed: np.ndarray) -> np.ndarray:
        """The positions among the next draws (accepted or not, in order) where the
        stopping rule holds."""
        hits, misses = np.cumsum(allowed), np.cumsum(~allowed)
        stop = (hits >= self.m - len(self.accepts)) | (misses >= self.cap - self.rejects)
        if self.coin:  # a draw with an accept before it
            stop |= len(self.accepts) + hits - allowed >= 1
        return np.flatnonzero(stop)

    def race(self, live: np.ndarray, ok: np.ndarray, pool: _Pool, choose: _Chooser) -> None:
        """Finish the walk at once, knowing which live entries are allowed: the rest
        of the arrival order is the order of independent clocks `T_i ~ Exp(q_i)`
        (each next arrival is entry `i` with probability `q_i / M`, as for a draw
        from the pool). All draws come from the Chooser's Generator."""
        probs = pool.probs[live]
        order = np.argsort(choose.rng.standard_exponential(len(live)) / probs, kind="stable")
        chosen = probs[order]
        before = np.cumsum(chosen[::-1])[::-1]  # the live mass not yet arrived, summed exactly
        end = self.arrive(live[order], chosen, before, ok[order], choose)
        pool.remove_many(live[order[:end]].tolist())

    def arrive(self, drawn: np.ndarray, chosen: np.ndarray, before: np.ndarray, ok: np.ndarray, choose: _Chooser) -> int:
        """Walk distinct tokens in arrival order, given their probabilities, the mass
        not yet arrived before each and whether each is allowed, up to the stopping
        rule; the choices' log probability goes to `choose`. Returns how many were
        walked."""
        stop = self._stops(ok)
        end = int(stop[0]) + 1 if len(stop) else len(drawn)
        self.accept_at.extend((len(self.masses) + np.flatnonzero(ok[:end])).tolist())
        self.masses.extend(before[:end].tolist())
        choose.logp += float(np.log(chosen[:end]).sum() - np.log(before[:end]).sum())
        self.accepts.extend(drawn[:end][ok[:end]].tolist())
        self.rejects += int(np.count_nonzero(~ok[:end]))
        self.done = bool(len(stop))
        return end


def skip_coin(walk: _Walk, probs: np.ndarray, choose: _Chooser) -> bool:
    """Whether the recursive estimator skips its coin draw: never when the first
    accept `x` holds less than half the mass `M` left at its draw, else with
    probability `q_x / M` (the with-replacement coin; see `genlm.control.sampler.awrs`)."""
    share = float(probs[walk.accepts[0]]) / walk.masses[walk.accept_at[0]]
    return share >= 0.5 and choose.coin(min(share, 1.0))


def estimate(sampler: Any, walk: _Walk, probs: Any, choose: _Chooser) -> tuple[int | None, float]:
    """`walk_estimate` under an AWRS sampler's settings."""
    return walk_estimate(
        walk,
        probs,
        choose,
        max_accepts=sampler.max_accepts,
        proper_weights=sampler.proper_weights,
        n_monte_carlo_samples=sampler.n_monte_carlo_samples,
    )


def walk_estimate(
    walk: _Walk,
    probs: np.ndarray,
    choose: _Chooser,
    *,
    max_accepts: int,
    proper_weights: bool,
    n_monte_carlo_samples: int | None,
) -> tuple[int | None, float]:
    """The returned token and `log Ẑ` of a finished walk (see `genlm.control.sampler.awrs`):
    the recursive estimator for a `coin` walk, else the race's Horvitz-Thompson weights."""
    if not walk.accepts:
        return None, NEG_INF
    if not proper_weights:
        return walk.accepts[0], math.log(walk.masses[walk.accept_at[0]])
    if max_accepts == 1:
        return walk.accepts[0], 0.0 if walk.accept_at[0] == 0 else NEG_INF
    if walk.coin:
        x, k = walk.accepts[0], walk.accept_at[0]
        q_x, mass = float(probs[x]), walk.masses[k]
        if walk.skip is None:  # the coin draw came in the first accept's block
            walk.skip = skip_coin(walk, probs, choose)
        heads = not walk.skip and len(walk.accept_at) > 1 and walk.accept_at[1] == k + 1
        if not heads:
            return x, math.log(q_x)
        return x, math.log(q_x + mass if q_x >= mass / 2 else mass)
    included = walk.accepts[: max_accepts - 1]
    q = probs[included]
    if not walk.done:  # every token was checked: A is known
        log_phi = np.log(q)
    elif n_monte_carlo_samples is not None and choose.draw is None:
        masses = np.array(walk.masses)
        log_phi = np.array([monte_carlo_inclusion(choose.rng, float(x), masses, n_monte_carlo_samples) for x in q])
    else:
        masses = np.array(walk.masses)
        log_phi = np.array([log_inclusion_estimate(float(x), masses) for x in q])
    first = included[0] if len(included) == 1 else choose.pick(included, np.exp(log_phi - log_phi.max()))
    return first, float(logsumexp(log_phi))
