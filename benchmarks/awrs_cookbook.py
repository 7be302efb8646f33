"""Condition calls and CPU time of AWRS on a harness-style pattern condition.

The condition is shaped like the pattern-matching domain of evaluation harnesses: a
user-defined Boolean `Potential` over the characters of `string.printable` (as code
points), whose `prefix` is a partial full-match of a pattern by the `regex` package
(patterns may use backreferences, which no automaton holds) and whose `complete` is a
full match; it is coerced to the embedded model with `.coerce(llm, f=b"".join)` (the
default pruned coercion) and used as AWRS's condition. `Pattern` counts the calls it
answers (`prefix` and `complete`, one context each), the harness's cost. Each run
gets a fresh sampler, as a harness builds one per problem.

Two workloads per pattern:
- `draws`: `sampler.sample([])` 10 times (10 draws from the empty context);
- `smc`: `sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=16)`.

It runs unchanged under genlm-control 0.4.1 (a separate venv with that release; the
model given by directory):

    python benchmarks/awrs_cookbook.py [--seeds 5] [--workloads draws smc]
    /work/venv-041/bin/python benchmarks/awrs_cookbook.py --model genlm/control/embedded/tiny
"""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import time

import numpy as np
import regex
from awrs_common import SEEDED, VERSION, load_llm, run_many

from genlm.control import AWRS, Potential

PROMPT = "Write a string that matches the pattern.\n"
PATTERNS = {
    "date": r"\d{4}-\d{2}-\d{2}",
    "words": r"[a-z]+( [a-z]+){2,5}\.",
    "repeat": r"(\w+) \1",
    "quoted": r"(['\"])[A-Za-z ]{3,12}\1",
}
NEG_INF = float("-inf")


class Pattern(Potential):
    """Boolean over `string.printable`: `prefix = 0` iff the text is a partial full match
    of `pattern`, `complete = 0` iff it is a full match. Counts the contexts it answers."""

    def __init__(self, pattern: str):
        super().__init__(list(map(ord, string.printable)))
        self.compiled = regex.compile(pattern)
        self.calls = 0

    def _text(self, context) -> str:
        return "".join(map(chr, context))

    async def prefix(self, context):
        self.calls += 1
        hit = self.compiled.fullmatch(self._text(context), partial=True)
        return 0.0 if hit is not None else NEG_INF

    async def complete(self, context):
        self.calls += 1
        return 0.0 if self.compiled.fullmatch(self._text(context)) is not None else NEG_INF


def seeded(seed: int) -> None:
    """Seed the global generators (0.4.1's draws use them)."""
    np.random.seed(seed)
    random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass


async def draws(sampler, seed: int) -> int:
    """10 draws from the empty context; the number that got a positive weight."""
    seeded(seed)
    kept = 0
    if SEEDED:
        from genlm.control.draw import using_rng

        with using_rng(np.random.default_rng(seed)):
            for _ in range(10):
                kept += (await sampler.sample([]))[1] > NEG_INF
        return kept
    for _ in range(10):
        kept += (await sampler.sample([]))[1] > NEG_INF
    return kept


async def smc(sampler, seed: int) -> int:
    """One SMC run; the number of particles of positive weight."""
    seeded(seed)
    (seqs,) = await run_many(sampler, [seed], n_particles=10, ess_threshold=0.5, max_tokens=16)
    return sum(w > NEG_INF for w in seqs.log_weights)


WORKLOADS = (("draws", "10 draws", draws), ("smc", "smc N=10, 16 tokens", smc))


async def measure(llm, pattern: str, workload, seeds: int) -> str:
    inner = Pattern(pattern)
    condition = inner.coerce(llm, f=b"".join)
    await workload(AWRS(llm, condition), 10_000)  # warm the LM's caches and the code paths
    calls, cpu, alive = [], [], 0
    for seed in range(seeds):
        sampler = AWRS(llm, condition)  # a harness builds one sampler per problem
        inner.calls = 0
        start = time.process_time()
        alive += await workload(sampler, seed)
        cpu.append(time.process_time() - start)
        calls.append(inner.calls)
    return (
        f"{len(condition.vocab)} | {np.mean(calls):.1f} ± {np.std(calls, ddof=1) / np.sqrt(len(calls)):.1f} (max {max(calls)}) | "
        f"{alive}/{10 * seeds} | {np.mean(cpu):.3f}"
    )


async def main(args) -> None:
    llm = load_llm(args.model, PROMPT)
    print(f"genlm-control {VERSION}; AWRS over Pattern(...).coerce(llm, f=b''.join); seeds 0..{args.seeds - 1}\n")
    print("| pattern | workload | condition tokens | condition calls / run (± s.e.) | positive weights | CPU s / run |")
    print("|---|---|---:|---:|---:|---:|")
    names = args.patterns or list(PATTERNS)
    workloads = [w for w in WORKLOADS if w[0] in (args.workloads or ("draws", "smc"))]
    for name in names:
        for _, label, workload in workloads:
            row = await measure(llm, PATTERNS[name], workload, args.seeds)
            print(f"| `{PATTERNS[name]}` | {label} | {row} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    parser.add_argument("--patterns", nargs="*", choices=sorted(PATTERNS))
    parser.add_argument("--workloads", nargs="*", choices=[w[0] for w in WORKLOADS])
    asyncio.run(main(parser.parse_args()))
