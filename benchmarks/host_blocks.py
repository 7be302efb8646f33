"""Resident memory and page faults over consecutive SMC runs on the 131k tekken model,
with the host blocks kept for reuse (`genlm/control/_host_blocks.py`) and without.

    python benchmarks/host_blocks.py [--runs 8] [--workload regex] [--fresh]

Loads the test suite's tekken model (HF, one thread), runs one warm-up run, then
`--runs` runs of the workload back to back (`real_tokenizers.py`'s regex AWRS N=10 or
unconstrained direct N=16, 32 tokens, caches cleared before every run), and prints per
run: ms per step, minor page faults per step (`getrusage`) and resident memory. The
HF floor (`floor.lm_floor`, same model, batch and length) is timed once before and once
after the runs. `--fresh` gives every block from `torch.empty` instead (the library
before the blocks were kept), so both can be measured from one tree.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import real_tokenizers as rt  # noqa: E402


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


async def main(runs: int, workload: str, fresh: bool) -> None:
    import torch

    torch.set_num_threads(1)
    if fresh:
        import genlm.control._host_blocks as host_blocks

        host_blocks.HOST_BLOCKS.empty = lambda rows, width, dtype: torch.empty(rows, width, dtype=dtype)
    models = rt.load("tekken", ["hf"])
    llm = models["hf"].spawn()
    llm.set_prompt_from_str(rt.PROMPT)
    _, n = rt.WORKLOADS[workload]
    floor = rt.floors_for(models, list(llm.prompt_ids), n)["hf"]
    sampler = rt.sampler_for(llm, workload)
    await rt.smc_seconds(llm, sampler, n, 0)

    def floor_ms(seed: int) -> float:
        t0 = time.perf_counter()
        floor(seed)
        return 1e3 * (time.perf_counter() - t0) / rt.STEPS

    before = floor_ms(0)
    print(f"{'fresh blocks' if fresh else 'kept blocks'}, {workload}, N={n}; HF floor {before:.2f} ms/step")
    print("| run | ms/step | page faults/step | resident MiB |")
    print("|---:|---:|---:|---:|")
    for r in range(runs):
        f0 = _faults()
        wall, steps = await rt.smc_seconds(llm, sampler, n, r + 1)
        print(f"| {r + 1} | {1e3 * wall / steps:.2f} | {(_faults() - f0) / steps:.0f} | {_rss_mib():.0f} |")
    print(f"HF floor after the runs: {floor_ms(1):.2f} ms/step")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--workload", default="regex", choices=sorted(rt.WORKLOADS))
    ap.add_argument("--fresh", action="store_true", help="every block from torch.empty (no reuse)")
    args = ap.parse_args()
    asyncio.run(main(args.runs, args.workload, args.fresh))
