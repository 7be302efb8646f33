"""Condition evaluations per token sampled by AWRS, for vocabularies of 4k, 32k, 128k tokens.

Synthetic LM: Zipf-like logits `-1.1 · log(rank)` over a random permutation of the
vocabulary. Condition: a random 10% of the tokens (and EOS) is allowed. AWRS checks
only the tokens it draws, so the count depends on how much LM mass the condition
removes, not on the vocabulary size.

    python benchmarks/awrs_condition_evals.py [--samples 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import math

import numpy as np

from genlm.control.draw import using_rng
from genlm.control.potential.base import Potential
from genlm.control.sampler.awrs import AWRS

NEG_INF = float("-inf")


class ZipfLM(Potential):
    """The same Zipf-like next-token row after every context."""

    def __init__(self, size: int, rng: np.random.Generator):
        super().__init__(list(range(size)))
        ranks = rng.permutation(size + 1) + 1
        self.row = -1.1 * np.log(ranks.astype(np.float64))

    async def logw_next(self, context):
        return self.make_lazy_weights(self.row)

    async def prefix(self, context):
        return float(sum(self.row[x] for x in context))

    async def complete(self, context):
        return await self.prefix(context) + float(self.row[-1])


class RandomSubset(Potential):
    """Boolean: a token is allowed when it is in a fixed random subset; counts checks."""

    def __init__(self, tables, rng: np.random.Generator, share: float):
        super().__init__(tables=tables)
        self.allowed = rng.random(len(tables.vocab_eos)) < share
        self.checks = 0

    async def prefix(self, context):
        if not context:
            return 0.0
        self.checks += 1
        return 0.0 if self.allowed[context[-1]] else NEG_INF

    async def complete(self, context):
        self.checks += 1
        return 0.0 if self.allowed[-1] else NEG_INF


async def measure(size: int, samples: int, seed: int) -> tuple[float, float, float]:
    """Mean and standard error of checks per sampled token, and the allowed LM mass."""
    rng = np.random.default_rng(seed)
    lm = ZipfLM(size, rng)
    cond = RandomSubset(lm.tables, rng, 0.10)
    sampler = AWRS(lm, cond, autobatch=False)
    counts = np.empty(samples)
    with using_rng(np.random.default_rng(seed + 1)):
        for i in range(samples):
            before = cond.checks
            await sampler.sample([])
            counts[i] = cond.checks - before
    p = np.exp(lm.row - np.logaddexp.reduce(lm.row))
    return counts.mean(), counts.std(ddof=1) / math.sqrt(samples), float(p[cond.allowed].sum())


async def main(samples: int, seed: int) -> None:
    print("| vocabulary | allowed LM mass | condition checks / token | checks / vocabulary |")
    print("|---:|---:|---:|---:|")
    for size in (4_096, 32_768, 131_072):
        means = [await measure(size, samples, seed + k) for k in range(3)]
        mean = np.mean([m[0] for m in means])
        se = math.sqrt(sum(m[1] ** 2 for m in means)) / len(means)
        mass = np.mean([m[2] for m in means])
        print(f"| {size:,} | {mass:.3f} | {mean:.2f} ± {se:.2f} | {mean / (size + 1):.2e} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.samples, args.seed))
