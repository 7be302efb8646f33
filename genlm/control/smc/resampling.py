"""Resampling schemes and population statistics: pure functions over arrays.

Every scheme has one signature, `ancestors = scheme(rng, weights, n)`: given a
generator, normalized weights `W` of `m` particles and a population size `n`, it
returns `n` ancestor indices, sorted, whose offspring counts `O_i` are unbiased,
`E[O_i] = n W_i`. The schemes differ in the variance of the counts
(Douc, Cappé & Moulines 2005, "Comparison of resampling schemes for particle
filtering"):

- `multinomial`: `O ~ Multinomial(n, W)`, `Var O_i = n W_i (1 - W_i)`.
- `stratified`: one uniform in each stratum `[k/n, (k+1)/n)`.
- `systematic`: one uniform shifted over every stratum; `O_i ∈ {⌊nW_i⌋, ⌈nW_i⌉}`.
- `residual`: `⌊nW_i⌋` copies, then a multinomial draw of the remainder.

`RESAMPLING_METHODS[name]` (also `get_resampling_fn(name)` and `<name>_resample`,
genlm-control 0.4.1's names) is a `Scheme`, which takes 0.4.1's call `f(weights)` too.

The statistics of a population are functions of its log weights:
`ess(logw) = 1 / Σ W_i²` and `log_mean_exp(logw) = log(Σ exp(logw) / m)`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from genlm.control.weights import NEG_INF, logsumexp

Resampler = Callable[[np.random.Generator, np.ndarray, int], np.ndarray]


def _check(weights: np.ndarray, n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"weights must be a non-empty 1-d array, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    total = w.sum()
    if total <= 0:
        raise ValueError("weights sum to zero: there is no particle to resample")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of ancestors must be a positive integer, got {n!r}")
    return w / total


def _inverse_cdf(w: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Indices `i` with `cdf[i-1] <= u < cdf[i]`; zero-weight indices are never chosen."""
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    cdf[np.flatnonzero(w)[-1] :] = 1.0
    return np.searchsorted(cdf, u, side="right")


def multinomial(rng: np.random.Generator, weights: np.ndarray, n: int) -> np.ndarray:
    """`n` independent draws from `W`: `O ~ Multinomial(n, W)`."""
    w = _check(weights, n)
    return _inverse_cdf(w, np.sort(rng.random(n)))


def stratified(rng: np.random.Generator, weights: np.ndarray, n: int) -> np.ndarray:
    """Inverse-CDF draws at `u_k = (k + U_k) / n`, `U_k ~ Uniform[0, 1)` independently."""
    w = _check(weights, n)
    return _inverse_cdf(w, (np.arange(n) + rng.random(n)) / n)


def systematic(rng: np.random.Generator, weights: np.ndarray, n: int) -> np.ndarray:
    """Inverse-CDF draws at `u_k = (k + U) / n` with one `U ~ Uniform[0, 1)`."""
    w = _check(weights, n)
    return _inverse_cdf(w, (np.arange(n) + rng.random()) / n)


def residual(rng: np.random.Generator, weights: np.ndarray, n: int) -> np.ndarray:
    """`⌊nW_i⌋` copies of each particle, then `R = n - Σ⌊nW_i⌋` multinomial draws from
    the residual weights `(nW_i - ⌊nW_i⌋) / R`."""
    w = _check(weights, n)
    scaled = n * w
    copies = np.floor(scaled).astype(np.int64)
    rest = n - int(copies.sum())
    if rest > 0:
        extra = _inverse_cdf(scaled - copies, np.sort(rng.random(rest)))
        copies += np.bincount(extra, minlength=w.size)
    return np.repeat(np.arange(w.size), copies)


class Scheme:
    """A resampling scheme, callable in two forms with the same distribution:

    - `scheme(rng, weights, n)`: `n` ancestors drawn with the generator `rng`;
    - `scheme(weights, rng=None)`: genlm-control 0.4.1's form, `len(weights)`
      ancestors. Without `rng` the generator is seeded from NumPy's legacy global
      state, so `np.random.seed(s)` makes such calls reproducible as it did in 0.4.1.
    """

    def __init__(self, draw: Resampler):
        self.draw = draw
        self.__name__ = draw.__name__
        self.__doc__ = draw.__doc__

    def __call__(self, *args, rng: np.random.Generator | None = None) -> np.ndarray:
        if len(args) == 1:
            (weights,) = args
            if rng is None:
                rng = np.random.default_rng(np.random.randint(0, 2**63 - 1, dtype=np.int64))
            return self.draw(rng, weights, len(weights))
        if len(args) != 3 or rng is not None:
            raise TypeError(
                f"{self.__name__} takes (rng, weights, n) or, as in 0.4.1, (weights, rng=None)"
            )
        return self.draw(*args)

    def __repr__(self) -> str:
        return f"<resampling scheme {self.__name__}>"


RESAMPLING_METHODS: dict[str, Scheme] = {
    "multinomial": Scheme(multinomial),
    "stratified": Scheme(stratified),
    "systematic": Scheme(systematic),
    "residual": Scheme(residual),
}

# genlm-control 0.4.1's names: `f(weights)` gives `len(weights)` ancestor indices.
multinomial_resample = RESAMPLING_METHODS["multinomial"]
stratified_resample = RESAMPLING_METHODS["stratified"]
systematic_resample = RESAMPLING_METHODS["systematic"]
residual_resample = RESAMPLING_METHODS["residual"]


def get_resampler(name: str) -> Scheme:
    """The scheme called `name`. An entry a user put into `RESAMPLING_METHODS` in
    0.4.1's form, a function `f(weights)` of the normalized weights returning
    `len(weights)` ancestor indices, is served as a `Scheme` that calls it.

    Raises:
        ValueError: if `name` is not one of `RESAMPLING_METHODS`.
    """
    try:
        scheme = RESAMPLING_METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown resampling method {name!r}; choose one of {sorted(RESAMPLING_METHODS)}"
        ) from None
    return scheme if isinstance(scheme, Scheme) else Scheme(_weights_only(scheme))


def _weights_only(fn: Callable) -> Resampler:
    """The `(rng, weights, n)` form of a 0.4.1-style `fn(weights)` (it brings its own
    randomness; `n` must be `len(weights)`)."""

    def draw(rng: np.random.Generator, weights: np.ndarray, n: int) -> np.ndarray:
        if n != len(weights):
            raise ValueError(f"{getattr(fn, '__name__', fn)!r} takes weights only: it draws len(weights) ancestors")
        out = np.asarray(fn(np.asarray(weights)))
        if out.shape != (n,):
            raise ValueError(
                f"resampling function {draw.__name__!r} returned shape {out.shape}: "
                f"it must return one ancestor index per particle ({n})"
            )
        return out

    draw.__name__ = getattr(fn, "__name__", "resampler")
    return draw


#: genlm-control 0.4.1's name of `get_resampler`.
get_resampling_fn = get_resampler


def offspring_counts(ancestors: np.ndarray, m: int) -> np.ndarray:
    """`O_i`: how many times each of `m` particles appears among `ancestors`."""
    return np.bincount(np.asarray(ancestors, dtype=np.int64), minlength=m)


def normalized_weights(log_weights: np.ndarray) -> np.ndarray:
    """`W_i = exp(logw_i) / Σ_j exp(logw_j)`; all zeros when every weight is `-inf`."""
    logw = np.asarray(log_weights, dtype=np.float64)
    total = logsumexp(logw)
    if total == NEG_INF:
        return np.zeros_like(logw)
    return np.exp(logw - total)


def ess(log_weights: np.ndarray) -> float:
    """Effective sample size `1 / Σ W_i²` (0 when every weight is `-inf`)."""
    w = normalized_weights(log_weights)
    sq = float(np.dot(w, w))
    return 0.0 if sq == 0.0 else 1.0 / sq


def log_mean_exp(log_weights: np.ndarray) -> float:
    """`log(Σ_i exp(logw_i) / m)`, `-inf` when every weight is `-inf`."""
    logw = np.asarray(log_weights, dtype=np.float64)
    if logw.size == 0:
        return NEG_INF
    return float(logsumexp(logw) - np.log(logw.size))


__all__ = [
    "RESAMPLING_METHODS",
    "Resampler",
    "Scheme",
    "ess",
    "get_resampler",
    "get_resampling_fn",
    "log_mean_exp",
    "multinomial",
    "multinomial_resample",
    "normalized_weights",
    "offspring_counts",
    "residual",
    "residual_resample",
    "stratified",
    "stratified_resample",
    "systematic",
    "systematic_resample",
]
