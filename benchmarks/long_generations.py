"""The host's cost per SMC step as the generated contexts grow (embedded model, HF).

    python benchmarks/long_generations.py                 # 32 and 200 tokens, 4 runs each
    python benchmarks/long_generations.py --tokens 32,120,200 --repeats 6

Each step hands every particle's whole context to the potentials, so work done per
token of the context grows with the run while the forward's new tokens do not. For
unconstrained SMC (`direct_token_sampler`, N=16, prompt "The function") at each
`max_tokens`, per step (medians over runs, caches cleared before each):

- `host`: the run's wall time less the time inside the model's `forward`, over its
  steps (the number of tokens of its longest context);
- `forward`: the time inside `forward`;
- `floor`: plain batched decoding of as many steps (`floor.lm_floor`), and `floor host`
  its time outside `forward` (its softmax and draw).

The model has 256 positions, so runs stop before 250 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from floor import ForwardClock, lm_floor  # noqa: E402

from genlm.control import PromptedLLM, direct_token_sampler  # noqa: E402
from genlm.control.embedded import EMBEDDED_MODEL  # noqa: E402


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="32,200", help="max_tokens values, comma-separated (at most 250)")
    ap.add_argument("--particles", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm = base.spawn()
    llm.set_prompt_from_str("The function")
    hf = base.model.model
    clock = ForwardClock(hf)
    sampler = direct_token_sampler(llm)
    gc.freeze()
    await sampler.smc(n_particles=args.particles, ess_threshold=0.5, max_tokens=8, seed=0)  # warm-up
    print(f"N={args.particles}, {args.repeats} runs per row; load average {os.getloadavg()[0]:.2f}")
    print("| max_tokens | steps | host ms/step | forward ms/step | floor ms/step | floor host ms/step |")
    print("|---:|---:|---:|---:|---:|---:|")
    for tokens in (int(t) for t in args.tokens.split(",")):
        rows = []
        for r in range(args.repeats):
            base.model.clear_cache()
            clock.seconds = 0.0
            start = time.perf_counter()
            seqs = await sampler.smc(n_particles=args.particles, ess_threshold=0.5, max_tokens=tokens, seed=r + 1)
            wall = time.perf_counter() - start
            forward = clock.seconds
            steps = max(len(c) for c in seqs.contexts)
            clock.seconds = 0.0
            start = time.perf_counter()
            lm_floor(hf, list(llm.prompt_ids), args.particles, steps, r + 1)
            floor = time.perf_counter() - start
            rows.append(((wall - forward) / steps, forward / steps, floor / steps, (floor - clock.seconds) / steps, steps))
        med = [statistics.median(row[i] for row in rows) for i in range(5)]
        print(f"| {tokens} | {med[4]:.0f} | **{1e3 * med[0]:.2f}** | {1e3 * med[1]:.2f} | {1e3 * med[2]:.2f} | {1e3 * med[3]:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
