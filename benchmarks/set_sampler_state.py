"""Time `sample_set` of set samplers with a stateful item potential against replaying.

The item potential is a byte-level constraint; the iter potential is a fixed random
row over the embedded model's vocabulary (no LM forward pass, so the time is the
trie walk and the item potential's rows). A context of 50 tokens is drawn (seeded)
from the coerced constraint, then `sample_set(ctx[:L])` is timed for L in 1, 10, 50:

- stateful: the item state is read once at the context and carried along the walk;
- replay: the same potential with `stateful = False`, asked `logw_next` at
  `β(ctx) + path(node)` for every visited node (its prefix cache looks up the whole
  context per node).

Each timing is the median over repeats of one call right after the potential's
caches were cleared and primed with `ctx[:L-1]`, as in SMC where each particle
extends its context by one token per step ("warm"), and of the same call repeated
("hot": every node's state already in the cache).

Run:  python benchmarks/set_sampler_state.py [--repeats 20] [--synthetic] [--cfg]

`--cfg` adds a Lark grammar (BoolCFG, Earley charts as states; 3 repeats, since
priming a context parses it from scratch).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from constraint_logw_next import REGEX, draw_context, embedded_vocab, synthetic_vocab  # noqa: E402

from genlm.control import WFSA, BoolCFG, BoolFSA, Potential  # noqa: E402
from genlm.control.draw import using_rng  # noqa: E402
from genlm.control.sampler.set import EagerSetSampler, TopKSetSampler  # noqa: E402

LARK = r"""
start: sentence (" " sentence)*
sentence: /[A-Z]/ /[a-z ,]+/ "."
"""
LENGTHS = (1, 10, 50)


class FixedRow(Potential):
    """`logw_next(ctx)` = one fixed random row, whatever the context."""

    def __init__(self, vocab, seed: int):
        super().__init__(vocab)
        self.row = np.random.default_rng(seed).normal(size=len(self.vocab_eos))

    async def prefix(self, context):
        return float(sum(self.row[self.lookup[x]] for x in context))

    async def complete(self, context):
        return await self.prefix(context) + float(self.row[-1])

    async def logw_next(self, context):
        return self.make_lazy_weights(self.row.copy())


def replaying(cls):
    """`cls` without the carried-state fast path."""
    return type(f"Replayed{cls.__name__}", (cls,), {"stateful": False})


def items(cfg: bool):
    yield "regex-float", lambda cls: cls.from_regex(REGEX), WFSA
    yield "regex-bool", lambda cls: cls.from_regex(REGEX), BoolFSA
    if cfg:
        yield "lark-bool", lambda cls: cls.from_lark(LARK), BoolCFG


async def time_set(sampler, ctx, seed) -> float:
    with using_rng(np.random.default_rng(seed)):
        t0 = time.perf_counter()
        await sampler.sample_set(ctx)
        return (time.perf_counter() - t0) * 1e6


async def warm_and_hot(sampler, item, ctx, repeats) -> tuple[float, float]:
    """Median µs of `sample_set(ctx)` after priming `ctx[:-1]`, and repeated."""
    warm, hot = [], []
    prime = list(b"".join(ctx[:-1]))
    for seed in range(repeats):
        item.clear_cache()
        await item.logw_next(prime)
        warm.append(await time_set(sampler, ctx, seed))
        hot.append(await time_set(sampler, ctx, seed))
    return statistics.median(warm), statistics.median(hot)


async def bench(name, make, cls, vocab, args, repeats: int) -> None:
    llm = FixedRow(vocab, args.seed)
    coerced = make(cls).coerce(vocab, f=b"".join)
    ctx = await draw_context(coerced, np.random.default_rng(args.seed), max(LENGTHS))
    pair = {"stateful": make(cls), "replay": make(replaying(cls))}
    for kind, build in (
        ("eager", EagerSetSampler),
        ("top-8", lambda a, b: TopKSetSampler(a, b, 8)),
    ):
        samplers = {k: build(llm, p) for k, p in pair.items()}
        for length in LENGTHS:
            if length > len(ctx):
                print(f"{name:<12} {kind:<6} L={length:<3} (context ended after {len(ctx)} tokens)")
                continue
            t = {
                k: await warm_and_hot(s, pair[k], ctx[:length], repeats)
                for k, s in samplers.items()
            }
            print(
                f"{name:<12} {kind:<6} L={length:<3} ({len(b''.join(ctx[:length])):>3} bytes)  "
                f"warm: stateful {t['stateful'][0]:>8.0f} µs  replay {t['replay'][0]:>8.0f} µs  "
                f"hot: stateful {t['stateful'][1]:>8.0f} µs  replay {t['replay'][1]:>8.0f} µs"
            )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cfg", action="store_true")
    args = ap.parse_args()
    vocab = (
        synthetic_vocab(np.random.default_rng(args.seed)) if args.synthetic else embedded_vocab()
    )
    print(
        f"vocabulary: {len(vocab)} tokens ({'synthetic' if args.synthetic else 'embedded model'})"
    )
    for name, make, cls in items(args.cfg):
        repeats = min(args.repeats, 3) if cls is BoolCFG else args.repeats
        await bench(name, make, cls, vocab, args, repeats)


if __name__ == "__main__":
    asyncio.run(main())
