"""Estimators of the proposal's accepted mass `q(A)` for AWRS: pure functions of counts.

From `K` rejections before the `m`-th accept, Haldane's `(m-1)/(m-1+K)` is unbiased;
averaged over skipped redraws `G_j ~ Geometric(s_j)` it is
`Ẑ = (m-1) ∫₀¹ t^(m-2+r) Π_j s_j / (1 - (1-s_j) t) dt` (see `genlm.control.sampler.awrs`).
"""

from __future__ import annotations

import math

import numpy as np


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


__all__ = [
    "haldane_estimate",
    "monte_carlo_estimate",
    "rao_blackwell_estimate",
    "truncated_estimate",
]
