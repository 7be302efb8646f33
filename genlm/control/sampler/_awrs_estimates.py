"""The estimator of AWRS: a Horvitz-Thompson weight for the first accepted tokens of an
exponential race, averaged over the race's unobserved times (pure functions of masses).

Every token `i` of the proposal's support arrives at `T_i ~ Exp(q_i)`, independently;
the search checks tokens in arrival order. Between the `(j-1)`-th and the `j`-th
arrival the tokens not yet arrived have mass `M_j`, so the gaps are independent
`Exp(M_j)` whatever the order, and the time of the `L`-th arrival is

    τ = Σ_{j ≤ L} E_j / M_j,    E_j ~ Exp(1) i.i.d., independent of the order.

An allowed token `i` is among the first `m-1` accepts iff `T_i < τ_i`, the time of the
`(m-1)`-th arrival among the other allowed tokens, which does not depend on `T_i`; when
`i` is among them, `τ_i` is the arrival of the `m`-th accept, `τ`. With
`π_i(t) = P(T_i < t) = 1 - exp(-q_i t)`, Horvitz-Thompson gives
`E[q_i 1{T_i < τ_i} / π_i(τ_i)] = q_i`, and averaging over the gaps given the order
(Rao-Blackwell):

    φ_i = E[q_i / (1 - exp(-q_i τ))] = q_i Σ_{n ≥ 0} Π_{j ≤ L} M_j / (M_j + n q_i)

(expand `1/(1 - e^{-x}) = Σ_n e^{-n x}` and use `E[e^{-s E_j / M_j}] = M_j / (M_j + s)`).
"""

from __future__ import annotations

import math

import numpy as np

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)
_HEADS = (1, 8, 64, 512)  # candidate numbers of terms summed one by one
_PANEL = 4.0  # width of a Gauss-Legendre panel in log t


def _log_prod(log_r: np.ndarray, log_t: np.ndarray) -> np.ndarray:
    """`Σ_j log(1 + r_j t)` at each node `t` (given as `log t`, ascending).

    Where `t · max r ≤ 1e-3` the sum is the series `Σ_n (-1)^(n+1) S_n t^n / n` in the
    power sums `S_n = Σ_j r_j^n`, cut after six terms (the rest is below `J·1e-21`
    relative); elsewhere the terms are summed in chunks of nodes.
    """
    top = float(log_r.max())
    out = np.empty(len(log_t))
    k = int(np.searchsorted(log_t, math.log(1e-3) - top, side="right"))
    if k:
        scaled = np.exp(log_r - top)
        powers = np.cumprod(np.broadcast_to(scaled, (6, len(scaled))), axis=0).sum(axis=1)
        y = np.exp(log_t[:k] + top)
        series = powers[5] / 6
        for n in (5, 4, 3, 2, 1):
            series = powers[n - 1] / n - y * series
        out[:k] = y * series
    chunk = max(1, 2**20 // len(log_r))
    for start in range(k, len(log_t), chunk):
        nodes = log_t[start : start + chunk]
        out[start : start + chunk] = np.logaddexp(0.0, nodes[:, None] + log_r[None, :]).sum(axis=1)
    return out


def _rates(log_r: np.ndarray, log_t: float) -> tuple[float, float, float]:
    """`t^k ρ_k(t) = Σ_j (r_j t / (1 + r_j t))^k` for k = 1, 2, 3, where the log-derivatives
    of `F(t) = Π_j 1/(1 + r_j t)` are `-ρ_1`, `ρ_2` and `-2ρ_3`."""
    x = np.exp(-np.logaddexp(0.0, -(log_r + log_t)))  # r t / (1 + r t)
    return float(x.sum()), float((x * x).sum()), float((x * x * x).sum())


def log_series_sum(log_r: np.ndarray) -> float:
    """`log Σ_{n ≥ 0} F(n)`, `F(t) = Π_j 1/(1 + r_j t)`, from `log r_j` (two or more).

    The first `n0` terms are summed (the least `n0` of 1, 8, 64, 512 with
    `ρ_1(n0 - 1/2) ≤ 0.05`, else 512), the
    rest by the midpoint Euler-Maclaurin formula at `a = n0 - 1/2`:

        Σ_{n ≥ n0} F(n) = ∫_a^∞ F + F'(a)/24 - 7 F'''(a)/5760 + O(ρ_1^5 F(a) / 31000),

    with `F' = -ρ_1 F`, `F''' = -(ρ_1³ + 3ρ_1ρ_2 + 2ρ_3) F`. The integral is taken over
    `v = log(t/a)` by composite 16-point Gauss-Legendre on panels of width 4 up to
    40/(J-1) e-folds past `1/min r` (each factor is a logistic step in `v` there),
    plus the power-law tail beyond. Everything stays in log space, so `r` may span
    1e-300..1e300.
    """
    log_r = np.asarray(log_r, dtype=np.float64)
    if len(log_r) < 2:
        raise ValueError("the series needs at least two factors")
    n0 = next((n for n in _HEADS if _rates(log_r, math.log(n - 0.5))[0] <= 0.05 * (n - 0.5)), _HEADS[-1])
    heads = -_log_prod(log_r, np.log(np.arange(1, n0, dtype=np.float64)))
    a = n0 - 0.5
    log_a = math.log(a)
    span = max(0.0, -log_a - float(log_r.min())) + 40.0 / (len(log_r) - 1) + _PANEL
    panels = int(math.ceil(span / _PANEL))
    v = (_PANEL * np.arange(panels)[:, None] + 0.5 * _PANEL * (_GL_NODES[None, :] + 1.0)).ravel()
    log_t = log_a + v
    nodes = np.log(np.tile(0.5 * _PANEL * _GL_WEIGHTS, panels)) + log_t - _log_prod(log_r, log_t)
    log_end = log_a + _PANEL * panels
    k_end = _rates(log_r, log_end)[0]  # the local power of F's decay at the end
    tail = log_end - float(_log_prod(log_r, np.array([log_end]))[0]) - math.log(k_end - 1.0)
    log_f_a = -float(_log_prod(log_r, np.array([log_a]))[0])
    x1, x2, x3 = _rates(log_r, log_a)
    r1, r2, r3 = x1 / a, x2 / a**2, x3 / a**3
    correction = -r1 / 24.0 + 7.0 * (r1**3 + 3.0 * r1 * r2 + 2.0 * r3) / 5760.0
    logs = np.concatenate(([0.0], heads, nodes, [tail]))
    top = float(logs.max())
    total = float(np.exp(logs - top).sum()) + math.exp(log_f_a - top) * correction
    return top + math.log(total)


def log_inclusion_estimate(q: float, masses: np.ndarray) -> float:
    """`log φ`, `φ = E[q / (1 - exp(-q τ))]`, `τ = Σ_j E_j / M_j` over the masses `M_j`
    before each arrival up to the threshold (module docstring); `q > 0`."""
    log_m = np.log(np.asarray(masses, dtype=np.float64))
    return math.log(q) + log_series_sum(math.log(q) - log_m)


def monte_carlo_inclusion(rng: np.random.Generator, q: float, masses: np.ndarray, n: int) -> float:
    """`log` of an unbiased Monte Carlo estimate of `φ` from `n` draws of the gaps."""
    masses = np.asarray(masses, dtype=np.float64)
    tau = (rng.standard_exponential((n, len(masses))) / masses[None, :]).sum(axis=1)
    return float(np.log(np.mean(q / -np.expm1(-q * tau))))


__all__ = ["log_inclusion_estimate", "log_series_sum", "monte_carlo_inclusion"]
