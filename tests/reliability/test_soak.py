"""Soak: SMC run after run on the embedded model with a constraint, at default
settings, keeps resident memory flat and every cache within its bound (timing
drift and the 1000-run plateau: benchmarks/soak.py)."""

import pytest
from soak import all_caches, bounded_bytes, filling, rss_bytes, timed_runs, warm_up, workload

from genlm.control.lm._hf_batch import (
    MIN_DEFAULT_CACHE_BYTES,
    default_cache_bytes,
)

GROWTH = 0.05
# Once the model's cache is full, a run grows memory by ~0.15 MiB while the engine's
# matcher cache fills (4096 states of ~11 KiB); the leak this guards against (a
# 1 GiB default KV cache filling) grew it by ~1 MiB per run.
MIB_PER_RUN = 0.5


@pytest.fixture(scope="module")
def soak():
    return workload()


def _check_caches(w):
    sizes = all_caches(w)
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


def test_the_default_kv_cache_is_sized_from_the_model(soak):
    model = soak.llm.model
    assert model.cache_bytes == default_cache_bytes(model.model) == MIN_DEFAULT_CACHE_BYTES


async def test_memory_is_flat_over_consecutive_runs_at_default_settings(soak):
    # warm up until the byte-bounded caches (the model's) are full, at most 150 runs
    for start in range(0, 150, 10):
        await timed_runs(soak, range(start, start + 10))
        if not [c for c in filling(_check_caches(soak)) if c.where.endswith("(bytes)")]:
            break
    else:
        pytest.fail(f"the model's cache did not fill in 150 runs: {_check_caches(soak)}")
    runs, first = 40, start + 10
    before = rss_bytes()
    await timed_runs(soak, range(first, first + runs))
    growth = rss_bytes() - before
    _check_caches(soak)
    assert growth < MIB_PER_RUN * runs * 2**20, f"resident memory grew by {growth / 2**20:.1f} MiB over {runs} runs"


@pytest.mark.slow
async def test_memory_is_flat_over_1000_runs_and_gathered_batches(soak):
    warm = await warm_up(soak, 1000)
    before, cached = rss_bytes(), bounded_bytes(_check_caches(soak))
    await timed_runs(soak, range(warm, warm + 1000))
    after, cached_after = rss_bytes(), bounded_bytes(_check_caches(soak))
    _assert_flat(before, after, cached, cached_after)
    # Gathered batches (32 sequences per forward) settle on a higher plateau of their
    # own after ~120 batches (benchmarks/soak.py): warm up 150, then measure 50.
    for b in range(200):
        if b == 150:
            before, cached = rss_bytes(), bounded_bytes(_check_caches(soak))
        results = await soak.gathered(range(10_000 + 8 * b, 10_008 + 8 * b))
        assert len(results) == 8
    after, cached_after = rss_bytes(), bounded_bytes(_check_caches(soak))
    _assert_flat(before, after, cached, cached_after)
