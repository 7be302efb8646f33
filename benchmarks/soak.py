"""Soak benchmark: per-run time, resident memory and cache sizes over many consecutive
SMC runs on the embedded model under a regex constraint (AWRS), then gathered batches.

    python benchmarks/soak.py [--runs 500] [--batches 50] [--batch-size 8]

Prints the time of each block of runs, the first vs last decile of per-run times
(drift), resident memory after warm-up and at the end, and every cache with its bound.
The workload is tests/reliability/soak.py, the same one the soak tests check.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reliability"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from soak import RUN, cache_sizes, rss_bytes, timed_runs, workload  # noqa: E402


def _mib(n: int) -> str:
    return f"{n / 2**20:8.1f} MiB"


def _report_caches(w) -> None:
    for c in cache_sizes(w.sampler) + cache_sizes(w.llm):
        bound = "unbounded" if c.bound is None else f"≤ {c.bound}"
        print(f"  cache {c.where}: {c.size} ({bound})")


async def main(runs: int, batches: int, batch_size: int, warm: int) -> None:
    w = workload()
    print(f"workload: AWRS on the embedded model, {RUN}")
    await timed_runs(w, range(warm))
    rss0 = rss_bytes()
    print(f"after {warm} warm-up runs: rss {_mib(rss0)}")
    times = np.array(await timed_runs(w, range(warm, warm + runs)))
    block = max(1, runs // 10)
    for i in range(0, runs, block):
        chunk = times[i : i + block]
        print(f"  runs {i:4d}-{i + len(chunk) - 1:4d}: mean {1e3 * chunk.mean():8.1f} ms/run")
    first, last = times[:block], times[-block:]
    print(
        f"per-run time: first decile {1e3 * np.median(first):.1f} ms (median), "
        f"last decile {1e3 * np.median(last):.1f} ms, ratio {np.median(last) / np.median(first):.3f}"
    )
    rss1 = rss_bytes()
    print(f"after {runs} runs: rss {_mib(rss1)} ({100 * (rss1 - rss0) / rss0:+.2f}%)")
    start = time.perf_counter()
    for b in range(batches):
        seeds = range(10_000 + batch_size * b, 10_000 + batch_size * (b + 1))
        await w.gathered(seeds)
    elapsed = time.perf_counter() - start
    rss2 = rss_bytes()
    if batches:
        print(
            f"{batches} gathered batches of {batch_size}: {1e3 * elapsed / batches:.1f} ms/batch, "
            f"rss {_mib(rss2)} ({100 * (rss2 - rss0) / rss0:+.2f}% since warm-up)"
        )
    _report_caches(w)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--warm", type=int, default=20)
    args = ap.parse_args()
    asyncio.run(main(args.runs, args.batches, args.batch_size, args.warm))
