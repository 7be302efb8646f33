"""An LM as the critic: its scoring cost per step as the particles' contexts grow.

    python benchmarks/lm_critic.py                       # N=8, 200 tokens, 3 repeats
    python benchmarks/lm_critic.py --tokens 120 --particles 16 --repeats 5

SMC scores every particle with its critic at every step (`critic.batch_score`). When
the critic is a `PromptedLLM` (an expert or a differently prompted copy of the model
twisting the proposal), a score is the sum of the log probabilities of all the
context's tokens. Computed from scratch, that is one term and one cached row per
token of the context, per particle and step, so the step grows with the context and
the run with its square. The embedded model proposes (`direct_token_sampler`, prompt
"The function"); the same model under another prompt ("A story about") is the
critic. Printed: milliseconds per `batch_score` call by the contexts' length (bins
of 20 tokens, medians over repeats), and the run's total.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from genlm.control import PromptedLLM, direct_token_sampler  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402

BIN = 20


def timed_scores(critic: PromptedLLM, bins: dict[int, list[float]]) -> None:
    """Wrap the critic's `batch_score` (on the instance) to add each call's seconds to
    `bins[len // BIN]`, `len` the longest context of the call."""
    score = critic.batch_score

    async def batch_score(contexts):
        start = time.perf_counter()
        try:
            return await score(contexts)
        finally:
            longest = max((len(c) for c in contexts), default=0)
            bins.setdefault(longest // BIN, []).append(time.perf_counter() - start)

    critic.batch_score = batch_score


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=200, help="max_tokens of each run (the model has 256 positions)")
    ap.add_argument("--particles", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    proposal, critic = base.spawn(), base.spawn()
    proposal.set_prompt_from_str("The function")
    critic.set_prompt_from_str("A story about")
    sampler = direct_token_sampler(proposal)
    gc.freeze()

    async def run(seed: int, bins: dict) -> float:
        base.model.clear_cache()
        timed_scores(critic, bins)
        try:
            start = time.perf_counter()
            await sampler.smc(
                n_particles=args.particles, ess_threshold=0.5, max_tokens=args.tokens, seed=seed, critic=critic
            )
            return time.perf_counter() - start
        finally:
            del critic.batch_score  # the class's method again

    await run(0, {})  # warm-up
    per_run: list[dict[int, float]] = []
    totals = []
    for r in range(args.repeats):
        bins: dict[int, list[float]] = {}
        totals.append(await run(r + 1, bins))
        per_run.append({b: 1e3 * statistics.mean(xs) for b, xs in bins.items()})
    print(f"N={args.particles}, max_tokens={args.tokens}, {args.repeats} runs; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| context tokens | ms per critic call |")
    print("|---|---:|")
    for b in sorted(set().union(*per_run)):
        values = [run[b] for run in per_run if b in run]
        print(f"| {b * BIN}–{b * BIN + BIN - 1} | {statistics.median(values):.2f} |")
    print(f"| whole run (s) | {statistics.median(totals):.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
