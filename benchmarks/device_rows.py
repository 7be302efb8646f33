"""Framework cost per SMC step over synthetic torch rows, against a bare torch draw.

A potential over `V` tokens whose `batch_logw_next` returns fixed float32 torch rows
(the rows a model on a device hands over, with the model's cost taken out) is
sampled by SMC with `N` particles for `STEPS` steps, with the direct sampler and with
AWRS under an engine-like condition (packed bit masks, as llguidance produces, with
no grammar cost), and AWRS on its search path under the same language checked in
blocks (`allowed_next`, no rows): on the CPU's default (the host search) and with
the race forced onto the tensors' device (`device_race = True`, a GPU's default). The reference, timed in the same run on the same rows, is the
bare stacked torch draw: `max`, `exp`, `cumsum` and `searchsorted` of one uniform
per row, i.e. what any sampler must do per step. The ratio is the framework's cost
(SMC bookkeeping, products, masks, the draw, the read-back) over that floor.

Usage (one torch thread, as in docs/performance.md):

    OMP_NUM_THREADS=1 python benchmarks/device_rows.py [--vocab 4096 32768 131072 262144]

It runs against whatever `genlm.control` is importable, so the same command on an
older checkout (`PYTHONPATH=that/checkout`) gives the "before" column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import time

import numpy as np
import torch

from genlm.control import AWRS, Potential, direct_token_sampler

N = 16
STEPS = 32
REPEATS = 7


class FixedRows(Potential):
    """Fixed torch rows over `V` tokens (EOS kept small so no particle stops)."""

    def __init__(self, vocab: int, n: int, seed: int = 0):
        super().__init__(list(range(vocab)))
        gen = torch.Generator().manual_seed(seed)
        row = torch.log_softmax(torch.randn(vocab + 1, generator=gen) * 2, dim=0)
        row[-1] = -30.0
        self.block = row.repeat(n, 1).contiguous()

    async def prefix(self, context):
        return 0.0

    async def complete(self, context):
        return 0.0

    async def logw_next(self, context):
        return self.make_lazy_weights(self.block[0])

    async def batch_logw_next(self, contexts):
        n = len(contexts)
        block = self.block if n == len(self.block) else self.block[:1].repeat(n, 1)
        return self.rows_to_weights(block)


class EvenTokens(Potential):
    """The language of the conditions below: even tokens only (EOS any time)."""

    def __init__(self, vocab: int):
        super().__init__(list(range(vocab)))

    async def prefix(self, context):
        return 0.0 if all(x % 2 == 0 for x in context) else -math.inf

    async def complete(self, context):
        return await self.prefix(context)


class PackedMask(EvenTokens):
    """A Boolean condition with an engine's interface: every other token allowed,
    held as packed 32-bit words (llguidance's layout), no grammar work. Older
    versions of the library, which lack `batch_allowed`, read its float rows."""

    cheap_logw_next = True

    def __init__(self, vocab: int):
        super().__init__(vocab)
        ids = np.arange(vocab)
        bits = np.zeros(((vocab + 31) // 32) * 32, dtype=np.uint8)
        bits[ids[ids % 2 == 0]] = 1
        self.words = np.packbits(bits, bitorder="little").view(np.int32)
        self.ids = ids
        self.engine = None
        self.row = np.where(np.append(ids % 2 == 0, True), 0.0, -math.inf)

    async def batch_logw_next(self, contexts):
        return self.rows_to_weights(np.tile(self.row, (len(contexts), 1)))

    async def logw_next(self, context):
        return self.make_lazy_weights(self.row)

    async def batch_allowed(self, contexts, like=None):
        """The engine's unpacking (`mask_allowed`), on `like`'s device."""
        from genlm.control.engine._guided_engine import EngineVocab, mask_allowed

        if self.engine is None:
            self.engine = EngineVocab(None, self.ids, (), len(self.words))
        n = len(contexts)
        return mask_allowed(self.engine, np.tile(self.words, (n, 1)), np.ones(n, dtype=bool), like)


class EvenNext(EvenTokens):
    """The same language as `PackedMask` for AWRS's search path: no rows, only
    `prefix`/`complete` and block checks (`allowed_next`, vectorised, no grammar
    work), so a step costs the race, the walks and the read-backs."""

    def __init__(self, vocab: int):
        super().__init__(vocab)
        self.vocab_size = vocab

    async def allowed_next(self, context, indices):
        indices = np.asarray(indices)
        return (indices % 2 == 0) | (indices == self.vocab_size)


def bare_draw(block: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    peak = block.amax(dim=1, keepdim=True)
    cdf = (block - peak).exp().cumsum(dim=1)
    u = torch.rand(block.shape[0], 1, generator=gen) * cdf[:, -1:]
    idx = torch.searchsorted(cdf, u, right=True).clamp_(max=block.shape[1] - 1)
    return idx.tolist()


def _clock() -> float:
    # CPU time of this process: on a shared machine it leaves out the time other
    # processes hold the core (everything here runs on one thread)
    return time.process_time()


def time_bare(block: torch.Tensor, gen: torch.Generator) -> float:
    t0 = _clock()
    for _ in range(STEPS):
        bare_draw(block, gen)
    return (_clock() - t0) / STEPS


def time_smc(sampler, seed: int) -> float:
    t0 = _clock()
    asyncio.run(sampler.smc(n_particles=N, ess_threshold=0.0, max_tokens=STEPS, seed=seed))
    return (_clock() - t0) / STEPS


def measure(vocab: int) -> dict:
    """Per repeat: the bare draw, direct SMC and AWRS SMC back to back; the medians
    of the times and of the per-repeat ratios."""
    pot = FixedRows(vocab, N)
    direct, awrs = direct_token_sampler(pot), AWRS(pot, PackedMask(vocab))
    search, race = AWRS(pot, EvenNext(vocab)), AWRS(pot, EvenNext(vocab))
    race.device_race = True  # what a GPU does by default; absent before that option
    gen = torch.Generator().manual_seed(0)
    for sampler in (direct, awrs, search, race):  # warm-up
        time_smc(sampler, 0)
    bare, d, a, s, k = [], [], [], [], []
    for r in range(REPEATS):
        bare.append(time_bare(pot.block, gen))
        d.append(time_smc(direct, r))
        a.append(time_smc(awrs, r))
        s.append(time_smc(search, r))
        k.append(time_smc(race, r))
    med = statistics.median
    return {
        "vocab": vocab,
        "bare_ms": med(bare) * 1e3,
        "direct_ms": med(d) * 1e3,
        "awrs_ms": med(a) * 1e3,
        "search_ms": med(s) * 1e3,
        "race_ms": med(k) * 1e3,
        "direct_ratio": med(x / y for x, y in zip(d, bare)),
        "awrs_ratio": med(x / y for x, y in zip(a, bare)),
        "search_ratio": med(x / y for x, y in zip(s, bare)),
        "race_ratio": med(x / y for x, y in zip(k, bare)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[4096, 32768, 131072, 262144])
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    print(f"N = {N}, {STEPS} steps, median of {REPEATS} (CPU time), torch threads = {torch.get_num_threads()}")
    print(
        "| V | bare draw (ms) | direct (ms) | direct / bare | AWRS (ms) | AWRS / bare "
        "| AWRS search (ms) | search / bare | device race (ms) | race / bare |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v in args.vocab:
        row = measure(v)
        rows.append(row)
        print(
            f"| {v} | {row['bare_ms']:.2f} | {row['direct_ms']:.2f} | {row['direct_ratio']:.2f}× "
            f"| {row['awrs_ms']:.2f} | {row['awrs_ratio']:.2f}× "
            f"| {row['search_ms']:.2f} | {row['search_ratio']:.2f}× "
            f"| {row['race_ms']:.2f} | {row['race_ratio']:.2f}× |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
