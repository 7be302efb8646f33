"""AWRS's pool of remaining proposal mass: draws equal an inverse CDF over the zeroed pool."""

import numpy as np
import pytest

from genlm.control.sampler.awrs import _Pool


@pytest.mark.parametrize("fold_at", [2, 5, 64])
def test_locate_equals_the_cdf_of_the_pool_with_rejects_zeroed(fold_at, monkeypatch):
    monkeypatch.setattr(_Pool, "fold_at", fold_at)
    rng = np.random.default_rng(fold_at)
    for trial in range(50):
        probs = rng.dirichlet(np.full(int(rng.integers(2, 40)), 0.3))
        probs[rng.random(len(probs)) < 0.2] = 0.0  # unreachable entries
        if probs.sum() == 0:
            continue
        pool = _Pool(probs)
        zeroed = probs.copy()
        live = list(np.flatnonzero(probs > 0))
        rng.shuffle(live)
        for i in live[: len(live) - 1]:
            cdf = np.cumsum(zeroed)
            assert np.isclose(pool.mass, cdf[-1], rtol=0, atol=1e-12)
            for u in rng.random(30) * cdf[-1]:
                want = int(np.searchsorted(cdf, u, side="right"))
                if np.min(np.abs(cdf - u)) > 1e-12:  # away from a rounding boundary
                    assert pool.locate(u) == want, (trial, u)
            pool.remove(int(i))
            zeroed[i] = 0.0
            assert sorted(pool.live_indices()) == sorted(np.flatnonzero(zeroed > 0))
        assert pool.live == 1 and pool.locate(0.0) == live[-1]
