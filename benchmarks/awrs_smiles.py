"""Condition calls per SMC run of AWRS on SMILES-like conditions without a cheap mask.

Two conditions, both coerced to the embedded model through `b"".join`:

- `grammar`: `benchmarks/grammars/smiles.lark` as `BoolCFG.from_lark`, coerced with
  `engine=False` (the generic Earley path);
- `charlevel`: `SmilesPrefix`, a user-defined Boolean `Potential` over the characters of
  a SMILES alphabet (`list(map(ord, ALPHABET))`), checked by a hand-written incremental
  scan; its default (pruned) coercion keeps only the LM tokens spelled in that alphabet.

AWRS sees the coerced condition through `Counted`, which counts the contexts it is asked
about per method. `AWRS(llm, condition).smc(n_particles=10, ess_threshold=0.5,
max_tokens=20)`, prompt "SMILES:", one run per seed.

    python benchmarks/awrs_smiles.py [--seeds 3]
    /tmp/v041/bin/python benchmarks/awrs_smiles.py --model /tmp/tinymodel/tiny
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
from awrs_common import SEEDED, VERSION, coerce, load_llm, run_many

from genlm.control import AWRS, BoolCFG, Potential

PROMPT = "SMILES:"
GRAMMAR = Path(__file__).resolve().parent / "grammars" / "smiles.lark"
ALPHABET = "BCFINOPSbcnoslr()=#-123456789"
ATOMS = frozenset(b"BCFINOPSbcnos")
METHODS = (
    "prefix",
    "complete",
    "batch_prefix",
    "batch_complete",
    "logw_next",
    "batch_logw_next",
    "allowed_next",
)
NEG_INF = float("-inf")


def scan(text: bytes) -> tuple[bool, bool]:
    """`(is a prefix, is complete)` of a simplified SMILES: atoms (two-letter `Cl`, `Br`),
    bonds `- = #` between atoms, branches `( … )`, ring digits after an atom."""
    depth, rings, state = 0, set(), "start"  # start | atom | bond | open
    for i, c in enumerate(text):
        if c in ATOMS:
            state = "atom"
        elif c in b"lr":  # the second letter of Cl / Br
            if (
                state != "atom"
                or i == 0
                or text[i - 1] != (ord("C") if c == ord("l") else ord("B"))
            ):
                return False, False
        elif c in b"-=#":
            if state not in ("atom", "open"):
                return False, False
            state = "bond"
        elif c == ord("("):
            if state != "atom":
                return False, False
            depth, state = depth + 1, "open"
        elif c == ord(")"):
            if state != "atom" or depth == 0:
                return False, False
            depth -= 1
        elif c in b"123456789":
            if state != "atom":
                return False, False
            rings ^= {c}
        else:
            return False, False
    return True, state == "atom" and depth == 0 and not rings


class SmilesPrefix(Potential):
    """Boolean over SMILES characters: `prefix = 0` iff `scan` reads a prefix,
    `complete = 0` iff it reads a whole molecule."""

    def __init__(self):
        super().__init__(list(map(ord, ALPHABET)))

    async def prefix(self, context):
        return 0.0 if scan(bytes(context))[0] else NEG_INF

    async def complete(self, context):
        return 0.0 if scan(bytes(context))[1] else NEG_INF


class Counted(Potential):
    """`inner` with the number of contexts (tokens, for `allowed_next`) asked per method."""

    def __init__(self, inner: Potential):
        try:
            super().__init__(tables=inner.tables)
        except TypeError:  # genlm-control 0.4.1: no shared tables
            super().__init__(list(inner.vocab))
        self.inner = inner
        self.calls: Counter = Counter()
        if getattr(inner, "allowed_next", None) is not None:  # None: not offered
            self.allowed_next = self._allowed_next

    async def prefix(self, context):
        self.calls["prefix"] += 1
        return await self.inner.prefix(context)

    async def complete(self, context):
        self.calls["complete"] += 1
        return await self.inner.complete(context)

    async def logw_next(self, context):
        self.calls["logw_next"] += 1
        return await self.inner.logw_next(context)

    async def batch_prefix(self, contexts):
        self.calls["prefix"] += len(contexts)
        return await self.inner.batch_prefix(contexts)

    async def batch_complete(self, contexts):
        self.calls["complete"] += len(contexts)
        return await self.inner.batch_complete(contexts)

    async def batch_logw_next(self, contexts):
        self.calls["logw_next"] += len(contexts)
        return await self.inner.batch_logw_next(contexts)

    async def _allowed_next(self, context, indices):
        self.calls["allowed_next"] += 1
        self.calls["allowed_next tokens"] += len(indices)
        return await self.inner.allowed_next(context, indices)


def conditions(llm):
    grammar = BoolCFG.from_lark(GRAMMAR.read_text())
    return {
        "grammar (Earley)": lambda: coerce(grammar, llm, False if SEEDED else "0.4.1"),
        "charlevel": lambda: SmilesPrefix().coerce(llm, f=b"".join),
    }


ESTIMATORS = ("race", "recursive") if SEEDED else (None,)  # 0.4.1: its own choice


async def measure(llm, condition, seeds: int, estimator: str | None) -> str:
    counted = Counted(condition)
    sampler = AWRS(llm, counted) if estimator is None else AWRS(llm, counted, estimator=estimator)
    per_run: list[Counter] = []
    seconds, cpu, dead = [], [], 0
    for seed in range(seeds):
        counted.calls = Counter()
        start, start_cpu = time.perf_counter(), time.process_time()
        (seqs,) = await run_many(sampler, [seed], n_particles=10, ess_threshold=0.5, max_tokens=20)
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        dead += sum(w == -math.inf for w in seqs.log_weights)
        per_run.append(counted.calls)
    keys = sorted({k for c in per_run for k in c})
    calls = ", ".join(f"{k} {np.mean([c[k] for c in per_run]):.0f}" for k in keys)
    total = [sum(v for k, v in c.items() if k != "allowed_next tokens") for c in per_run]
    return (
        f"{len(condition.vocab)} | {np.mean(total):.0f} (max {max(total)}) | {calls} | "
        f"{dead}/{10 * seeds} | {np.mean(seconds):.1f} | {np.mean(cpu):.2f}"
    )


async def main(args) -> None:
    llm = load_llm(args.model, PROMPT)
    print(
        f"genlm-control {VERSION}; AWRS, prompt {PROMPT!r}, N = 10, max_tokens = 20, ESS 0.5, seeds 0..{args.seeds - 1}\n"
    )
    print(
        "| condition | estimator | condition tokens | calls / run (mean) | per method (mean / run) | dead particles | s / run | CPU s / run |"
    )
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for name, make in conditions(llm).items():
        condition = make()
        for estimator in ESTIMATORS:
            try:
                row = await measure(llm, condition, args.seeds, estimator)
            except (TypeError, ValueError) as e:
                row = f"{len(condition.vocab)} | — | {type(e).__name__}: {e} | — | —"
            print(f"| {name} | {estimator or VERSION} | {row} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    asyncio.run(main(parser.parse_args()))
