"""AWRS's pool of remaining proposal mass: draws equal an inverse CDF over the zeroed pool."""

import numpy as np
import pytest

from genlm.control.sampler.awrs import _Pool


@pytest.mark.parametrize("size", [2, 7, 40, 300, 1100])
def test_locate_equals_the_cdf_of_the_pool_with_rejects_zeroed(size):
    rng = np.random.default_rng(size)
    for trial in range(20 if size < 300 else 3):
        probs = rng.dirichlet(np.full(size, 0.3))
        probs[rng.random(size) < 0.2] = 0.0  # unreachable entries
        if probs.sum() == 0:
            continue
        pool = _Pool(probs)
        zeroed = probs.copy()
        live = list(np.flatnonzero(probs > 0))
        rng.shuffle(live)
        while len(live) > 1:
            cdf = np.cumsum(zeroed)
            assert np.isclose(pool.mass, cdf[-1], rtol=0, atol=1e-12)
            for k in (1, 5, 400):  # one row at a time, and the whole-pool prefix sum
                u = rng.random(k) * cdf[-1]
                want = np.searchsorted(cdf, u, side="right")
                clear = np.min(np.abs(cdf[None, :] - u[:, None]), axis=1) > 1e-12  # off a boundary
                got = pool.locate_many(u)
                assert np.array_equal(got[clear], want[clear]), (trial, k)
                assert all(zeroed[got] > 0)
            out = [int(i) for i in live[: int(rng.integers(1, 4))]][: len(live) - 1]
            pool.remove_many(out)
            zeroed[out] = 0.0
            live = live[len(out) :]
            assert sorted(pool.live_indices()) == sorted(np.flatnonzero(zeroed > 0))
        assert list(pool.live_indices()) == live[-1:] and pool.locate(0.0) == live[-1]
