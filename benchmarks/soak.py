"""Soak benchmark: per-run time, resident memory and cache sizes over many consecutive
SMC runs on the embedded model under a regex constraint (AWRS), then gathered batches.

    python benchmarks/soak.py [--runs 1000] [--batches 50] [--batch-size 8] [--max-warm 1000]

Settings are the defaults (no cache is resized). Warm-up runs until every bounded
cache is 90% full (or stops growing); then prints the time and resident memory of
each block of runs, the first vs last decile of per-run times (drift), the resident
memory after warm-up and at the end (the plateau), and every cache with its bound.
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

from soak import RUN, all_caches, rss_bytes, timed_runs, warm_up, workload  # noqa: E402


def _mib(n: int) -> str:
    return f"{n / 2**20:8.1f} MiB"


def _report_caches(w) -> None:
    for c in all_caches(w):
        bound = "unbounded" if c.bound is None else f"≤ {c.bound}"
        print(f"  cache {c.where}: {c.size} ({bound})")


async def main(runs: int, batches: int, batch_size: int, max_warm: int) -> None:
    w = workload()
    print(f"workload: AWRS on the embedded model, default settings, {RUN}")
    print(f"before any run: rss {_mib(rss_bytes())}")
    warm = await warm_up(w, max_warm)
    rss0 = rss_bytes()
    print(f"after {warm} warm-up runs (caches filled): rss {_mib(rss0)}")
    _report_caches(w)
    block = max(1, runs // 10)
    times = []
    for i in range(0, runs, block):
        chunk = np.array(await timed_runs(w, range(warm + i, warm + min(runs, i + block))))
        times.extend(chunk)
        rss = rss_bytes()
        print(
            f"  runs {i:4d}-{i + len(chunk) - 1:4d}: mean {1e3 * chunk.mean():8.1f} ms/run, "
            f"rss {_mib(rss)} ({100 * (rss - rss0) / rss0:+.2f}%)"
        )
    times = np.array(times)
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
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-warm", type=int, default=1000)
    args = ap.parse_args()
    asyncio.run(main(args.runs, args.batches, args.batch_size, args.max_warm))
