"""Cancellation latency of SMC over a coerced potential with only prefix/complete.

    python benchmarks/cancel_latency.py [--limits 0.5 5] [--old]

The constraint is a byte-level `Potential` over `range(256)` whose `prefix` refuses
ASCII digits, coerced onto the embedded model's 4096 tokens with `f=b"".join`; the
sampler is `direct_token_sampler(llm * coerced)`, so every step needs the coerced
`logw_next` (a trie walk of ~1.7M `prefix` calls). Prints, for each limit, how long
`asyncio.wait_for(sampler.smc(...), limit)` took to return (latency = that minus the
limit), then the time and `prefix` calls of one `Coerced.logw_next([])`; with
`--old`, also of the walk through the base class's `logw_next` (as before pacing).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from genlm.control import Potential, PromptedLLM, direct_token_sampler  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402
from genlm.control.potential import coerce as coerce_module  # noqa: E402


class NoDigits(Potential):
    def __init__(self):
        super().__init__(list(range(256)))
        self.calls = 0

    async def prefix(self, context):
        self.calls += 1
        return -math.inf if any(48 <= c <= 57 for c in context) else 0.0

    async def complete(self, context):
        return await self.prefix(context)


async def latency(sampler, limit: float) -> float:
    start = time.perf_counter()
    try:
        await asyncio.wait_for(sampler.smc(n_particles=4, ess_threshold=0.5, max_tokens=5), limit)
    except TimeoutError:
        pass
    return time.perf_counter() - start


async def one_walk(coerced, inner) -> tuple[float, int]:
    inner.calls = 0
    start = time.perf_counter()
    await coerced.logw_next([])
    return time.perf_counter() - start, inner.calls


async def main(limits: list[float], old: bool) -> None:
    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm.set_prompt_from_str("Hello")
    inner = NoDigits()
    coerced = inner.coerce(llm, f=b"".join)
    sampler = direct_token_sampler(llm * coerced)
    await latency(sampler, 0.2)  # first-use imports and the trie
    for limit in limits:
        took = await latency(sampler, limit)
        print(f"wait_for(smc, {limit}) returned after {took:.3f} s: latency {1e3 * (took - limit):.0f} ms")
    took, calls = await one_walk(coerced, inner)
    print(f"Coerced.logw_next([]): {took:.2f} s, {calls} prefix calls")
    if old:
        coerce_module.has_vectorised_logw_next = lambda p: True  # the base class's rows
        took, calls = await one_walk(coerced, inner)
        print(f"  through the base class's logw_next: {took:.2f} s, {calls} prefix calls")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[0.5, 5.0])
    ap.add_argument("--old", action="store_true")
    args = ap.parse_args()
    asyncio.run(main(args.limits, args.old))
