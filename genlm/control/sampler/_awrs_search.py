"""The search machinery of AWRS: the proposal with known rejects removed, the random
choices, and the walk that tallies a search's draws.

A draw from the pool is a draw from `q` restricted to the tokens not yet known to be
rejected, `q(x) / (1 - R)` with `R` the mass of the rejects found.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from genlm.control.weights import NEG_INF, fold_nan


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
