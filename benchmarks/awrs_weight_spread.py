"""Spread of AWRS weights where the allowed mass is small: w/Z over repeated draws.

A proposal over 4,000 tokens (Zipf-like) and a Boolean condition that allows only
tokens holding a share 1e-4 of its mass (one token, or three). Z is the exact allowed
weight, so a properly weighted sampler has E[w/Z] = 1; the median and the 99th
percentile of w/Z show how skewed single weights are. Three conditions, one per AWRS
path: one that declares `cheap_logw_next` (exact rows), one over only 12 of the 4,000
tokens (a pruned coercion: small support), and a plain one (the search). Runs against
whichever genlm-control is importable (a release without subset vocabularies gets the
12-token condition written over the full vocabulary instead).

    python benchmarks/awrs_weight_spread.py [--samples 500] [--seed 0]
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
SIZE = 4_000


class Row(Potential):
    """The same next-token row after every context; counts `prefix`/`complete` calls."""

    def __init__(self, vocab: list, row: np.ndarray, cheap: bool = False):
        super().__init__(vocab)
        self.row, self.checks = row, 0
        self.cheap_logw_next = cheap

    async def logw_next(self, context):
        return self.make_lazy_weights(self.row)

    async def prefix(self, context):
        self.checks += 1
        return float(sum(self.row[self.lookup[x]] for x in context[-1:]))

    async def complete(self, context):
        self.checks += 1
        return float(self.row[-1])


def case(rng: np.random.Generator, allowed: int, share: float):
    """The LM row and the indices of the allowed tokens (their LM mass is `share`)."""
    logits = -1.1 * np.log(rng.permutation(SIZE + 1) + 1.0)
    p = np.exp(logits - np.logaddexp.reduce(logits))
    chosen = rng.choice(SIZE, size=allowed, replace=False)
    rest = np.setdiff1d(np.arange(SIZE + 1), chosen)
    p[rest] *= (1.0 - share) / p[rest].sum()
    p[chosen] *= share / p[chosen].sum()
    return np.log(p), chosen


def conditions(vocab: list, chosen: np.ndarray, rng: np.random.Generator):
    full = np.full(SIZE + 1, NEG_INF)
    full[chosen] = 0.0
    part = sorted(set(chosen.tolist()) | set(rng.choice(SIZE, size=12 - len(chosen), replace=False).tolist()))
    small = np.array([0.0 if i in set(chosen.tolist()) else NEG_INF for i in part] + [NEG_INF])
    try:
        subset = Row([vocab[i] for i in part], small)
        AWRS(Row(vocab, np.zeros(SIZE + 1)), subset)
    except ValueError:  # no subset vocabularies: the same constraint over every token
        subset = Row(vocab, full)
    return {"exact rows": Row(vocab, full, cheap=True), "12-token condition": subset, "search": Row(vocab, full)}


async def measure(samples: int, seed: int, allowed: int) -> None:
    rng = np.random.default_rng(seed)
    logits, chosen = case(rng, allowed, 1e-4)
    vocab = list(range(SIZE))
    lm = Row(vocab, logits)
    for name, cond in conditions(vocab, chosen, rng).items():
        sampler = AWRS(lm, cond, autobatch=False)
        z = math.exp(np.logaddexp.reduce([logits[vocab.index(x)] for x in cond.vocab if cond.row[cond.lookup[x]] == 0]))
        ratios = np.empty(samples)
        with using_rng(np.random.default_rng(seed + 1)):
            for i in range(samples):
                ratios[i] = math.exp((await sampler.sample([]))[1]) / z
        se = ratios.std(ddof=1) / math.sqrt(samples)
        print(
            f"| {allowed} | {name} | {ratios.mean():.3f} ± {se:.3f} | {np.median(ratios):.3f} | "
            f"{np.quantile(ratios, 0.99):.3f} | {cond.checks / samples:.0f} |"
        )


async def main(samples: int, seed: int) -> None:
    print("| allowed tokens | condition | E[w/Z] | median w/Z | 99th pct w/Z | checks / draw |")
    print("|---:|---|---:|---:|---:|---:|")
    for allowed in (1, 3):
        await measure(samples, seed, allowed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.samples, args.seed))
