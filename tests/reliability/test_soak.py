"""Soak: SMC run after run on the embedded model with a constraint keeps resident
memory flat and every cache within its bound (timing drift: benchmarks/soak.py)."""

import pytest
from soak import bounded_bytes, cache_sizes, rss_bytes, timed_runs, workload

GROWTH = 0.05


@pytest.fixture(scope="module")
def soak():
    return workload()


def _check_caches(w):
    sizes = cache_sizes(w.sampler) + cache_sizes(w.llm)
    assert sizes, "no cache found to check"
    for c in sizes:
        assert c.bound is not None or c.size == 0, f"{c.where} has no bound and holds {c.size} entries"
        assert c.bound is None or c.size <= c.bound, c
    return sizes


def _assert_flat(before, after, cached_before, cached_after):
    # bytes the bounded caches account for are checked against their bounds instead
    growth = (after - before) - max(0, cached_after - cached_before)
    assert growth < GROWTH * before, (
        f"resident memory grew by {growth / 2**20:.1f} MiB beyond the bounded caches "
        f"({100 * growth / before:.1f}% of {before / 2**20:.0f} MiB)"
    )


async def _consecutive(w, warm: int, runs: int):
    await timed_runs(w, range(warm))
    before, cached = rss_bytes(), bounded_bytes(_check_caches(w))
    await timed_runs(w, range(warm, warm + runs))
    after, cached_after = rss_bytes(), bounded_bytes(_check_caches(w))
    _assert_flat(before, after, cached, cached_after)


async def test_memory_is_flat_over_consecutive_runs(soak):
    await _consecutive(soak, warm=10, runs=40)


@pytest.mark.slow
async def test_memory_is_flat_over_500_runs_and_50_gathered_batches(soak):
    await _consecutive(soak, warm=20, runs=500)
    before, cached = rss_bytes(), bounded_bytes(_check_caches(soak))
    for b in range(50):
        results = await soak.gathered(range(10_000 + 8 * b, 10_008 + 8 * b))
        assert len(results) == 8
    after, cached_after = rss_bytes(), bounded_bytes(_check_caches(soak))
    _assert_flat(before, after, cached, cached_after)
