"""A user's soft potential (only `prefix`/`complete`) over the embedded model's tokens,
as a factor of `llm * mine` and as a critic: what each costs.

The factor's rows come from the base class's derived `logw_next`: one `batch_prefix`
over the V extensions of the context. The script times, on one context:

- `batch_prefix` over the V extensions (the floor the derived row can reach);
- `mine.logw_next(ctx)` (the derived row);
- `direct_token_sampler(llm * mine).smc(...)` and the same target with `mine` as the
  critic (`direct_token_sampler(llm).smc(..., critic=mine)`), end to end.

Run:  python benchmarks/soft_potential.py [--particles 4] [--max-tokens 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(llm):
    from genlm.control import Potential

    class ShortWords(Potential):
        """Soft preference for texts whose words are at most 5 bytes: -1 per longer word."""

        async def prefix(self, context):
            words = b"".join(context).split()
            return -float(sum(len(w) > 5 for w in words))

        async def complete(self, context):
            return await self.prefix(context)

    return ShortWords(llm.vocab)


async def timed(label, make, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        await make()
        best = min(best, time.perf_counter() - t0)
    print(f"{label:<46} {best * 1e3:10.1f} ms")
    return best


async def main(args):
    from genlm.control import PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm.set_prompt_from_str("The weather today is")
    mine = build(llm)
    ctx = llm.tokenize(" sunny and")
    ext = [[*ctx, x] for x in mine.vocab]
    print(f"V = {len(mine.vocab)}, context of {len(ctx)} tokens")
    floor = await timed("batch_prefix over V extensions", lambda: mine.batch_prefix(ext))
    row = await timed("derived logw_next(ctx)", lambda: mine.logw_next(ctx))
    print(f"{'derived row / batch_prefix floor':<46} {row / floor:10.2f} x")
    run = dict(n_particles=args.particles, ess_threshold=0.5, max_tokens=args.max_tokens, seed=0)
    await timed(f"smc of llm * mine ({args.particles} particles)",
                lambda: direct_token_sampler(llm * mine).smc(**run), repeats=1)
    await timed(f"smc of llm, critic=mine ({args.particles} particles)",
                lambda: direct_token_sampler(llm).smc(**run, critic=mine), repeats=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
