"""Resampling schemes: unbiased offspring counts, variance, structural guarantees."""

import math

import numpy as np
import pytest

from genlm.control.smc.resampling import (
    RESAMPLING_METHODS,
    ess,
    get_resampler,
    log_mean_exp,
    multinomial,
    normalized_weights,
    offspring_counts,
    residual,
    stratified,
    systematic,
)

W = np.array([0.05, 0.3, 0.0, 0.22, 0.13, 0.3])
N = 7
REPS = 4000


def _counts(scheme, w=W, n=N, reps=REPS, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([offspring_counts(scheme(rng, w, n), len(w)) for _ in range(reps)])


@pytest.mark.parametrize("name", sorted(RESAMPLING_METHODS))
def test_offspring_counts_are_unbiased(name):
    counts = _counts(RESAMPLING_METHODS[name])
    mean = counts.mean(axis=0)
    sem = counts.std(axis=0, ddof=1) / math.sqrt(REPS)
    want = N * W
    assert np.all(np.abs(mean - want) <= 4 * sem + 1e-12), (mean, want, sem)
    assert counts[:, 2].max() == 0, "a zero-weight particle must never be chosen"
    assert np.all(counts.sum(axis=1) == N)


@pytest.mark.parametrize("name", ["stratified", "systematic", "residual"])
def test_variance_is_at_most_multinomial(name):
    counts = _counts(RESAMPLING_METHODS[name], seed=1)
    var = counts.var(axis=0, ddof=1)
    multinomial_var = N * W * (1 - W)
    # the sample variance of a bounded count has standard error ≲ sqrt(2/REPS)·var + slack
    assert np.all(var <= multinomial_var * (1 + 4 * math.sqrt(2 / REPS)) + 1e-9), (var, multinomial_var)
    # and the multinomial scheme matches its own theoretical variance
    m = _counts(multinomial, seed=2).var(axis=0, ddof=1)
    np.testing.assert_allclose(m, multinomial_var, rtol=0.1, atol=1e-9)


def test_systematic_counts_are_floor_or_ceil():
    rng = np.random.default_rng(3)
    for _ in range(300):
        w = rng.dirichlet(np.full(9, 0.5))
        n = int(rng.integers(1, 20))
        c = offspring_counts(systematic(rng, w, n), len(w))
        assert np.all((c == np.floor(n * w)) | (c == np.ceil(n * w))), (w, n, c)


def test_stratified_counts_are_exact_when_strata_align():
    # cumulative weights on multiples of 1/n: every particle owns whole strata
    rng = np.random.default_rng(4)
    n = 10
    for _ in range(200):
        k = rng.multinomial(n, np.full(5, 0.2))
        c = offspring_counts(stratified(rng, k / n, n), 5)
        np.testing.assert_array_equal(c, k)


def test_residual_keeps_the_floor_copies():
    rng = np.random.default_rng(5)
    for _ in range(300):
        w = rng.dirichlet(np.full(6, 0.7))
        n = int(rng.integers(1, 25))
        c = offspring_counts(residual(rng, w, n), len(w))
        assert np.all(c >= np.floor(n * w)) and c.sum() == n


@pytest.mark.parametrize("name", sorted(RESAMPLING_METHODS))
def test_degenerate_weights_copy_the_one_particle(name):
    rng = np.random.default_rng(6)
    w = np.array([0.0, 0.0, 1.0, 0.0])
    a = RESAMPLING_METHODS[name](rng, w, 5)
    np.testing.assert_array_equal(a, [2, 2, 2, 2, 2])
    # a single particle, and an unnormalized weight vector
    np.testing.assert_array_equal(RESAMPLING_METHODS[name](rng, np.array([3.0]), 3), [0, 0, 0])
    a = RESAMPLING_METHODS[name](rng, np.array([2.0, 0.0]), 4)
    np.testing.assert_array_equal(a, [0, 0, 0, 0])


@pytest.mark.parametrize("name", sorted(RESAMPLING_METHODS))
def test_same_generator_state_gives_same_ancestors(name):
    f = RESAMPLING_METHODS[name]
    a = f(np.random.default_rng(7), W, 11)
    b = f(np.random.default_rng(7), W, 11)
    np.testing.assert_array_equal(a, b)
    assert np.all(np.diff(a) >= 0), "ancestors come sorted"


@pytest.mark.parametrize(
    "weights, n, match",
    [
        (np.array([0.0, 0.0]), 2, "sum to zero"),
        (np.array([0.5, -0.1]), 2, "non-negative"),
        (np.array([0.5, np.nan]), 2, "finite"),
        (np.array([]), 2, "non-empty"),
        (np.array([0.5, 0.5]), 0, "positive integer"),
    ],
)
def test_bad_input_is_a_clear_error(weights, n, match):
    with pytest.raises(ValueError, match=match):
        systematic(np.random.default_rng(0), weights, n)


def test_unknown_method_names_the_choices():
    with pytest.raises(ValueError, match="multinomial"):
        get_resampler("bogus")


def test_population_statistics():
    logw = np.log(np.array([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(normalized_weights(logw), [0.25, 0.25, 0.5])
    assert ess(logw) == pytest.approx(1 / (0.25**2 * 2 + 0.25))
    assert log_mean_exp(logw) == pytest.approx(math.log(4 / 3))
    dead = np.full(4, -np.inf)
    with np.errstate(all="raise"):
        assert ess(dead) == 0.0
        assert log_mean_exp(dead) == -np.inf
        np.testing.assert_array_equal(normalized_weights(dead), np.zeros(4))
    assert ess(np.array([0.0, -np.inf, -np.inf])) == pytest.approx(1.0)
