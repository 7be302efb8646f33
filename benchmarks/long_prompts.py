"""The host's cost per SMC step as the prompt grows, on the 131k-token tekken model (HF).

    python benchmarks/long_prompts.py                    # prompts of about 3, 300 and 900 tokens
    python benchmarks/long_prompts.py --prompts 3,900 --repeats 7 --only regex

Every query of a step names its context by the whole token sequence, prompt included,
so any work done per item of that sequence grows with the prompt while the forward's
new tokens do not. For unconstrained SMC (`direct_token_sampler`, N=16) and regex AWRS
(N=10, `real_tokenizers.PATTERN`), each prompt length gets, per step (medians over
repeats after a warm-up, caches cleared before every run):

- `SMC`: the run's wall time over its steps;
- `forward`: the time spent inside the model's own `forward` during the run;
- `host`: `SMC - forward`, everything the step does besides the forward (rows, draws,
  constraint, SMC bookkeeping, cache keys);
- `decode floor`: plain batched decoding of the same rows over the same prompt, its
  prompt forward left out (`floor.lm_floor` counts it, which at long prompts is most of
  its time), and the forward's share of it.

The model is the test suite's Llama-shaped toy (hidden size 32, 1,024 positions), so
the forward is cheap and the host's work shows. The prompt is English words repeated.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_tokenizers as rt  # noqa: E402
import torch  # noqa: E402
from floor import ForwardClock, _draw  # noqa: E402
from transformers import DynamicCache  # noqa: E402

WORDS = "the quick brown fox jumps over the lazy dog while a function returns values".split()


@torch.no_grad()
def decode_floor(model, clock: ForwardClock, prompt: list[int], n: int, steps: int, seed: int) -> tuple[float, float]:
    """(seconds, forward seconds) of `steps` decode steps of `n` rows after `prompt`,
    the prompt's own forward not counted: `lm_floor`'s loop timed from its first draw."""
    gen = torch.Generator().manual_seed(seed)
    params = inspect.signature(type(model).forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    # the prompt's logits at its last position only (all of them: 16 x 900 x 131k floats)
    out = model(torch.tensor([prompt] * n), use_cache=True, logits_to_keep=1, **{cache_arg: DynamicCache()})
    clock.seconds = 0.0
    t0 = time.perf_counter()
    for step in range(steps):
        tokens = _draw(torch.softmax(out.logits[:, -1].float(), dim=-1), gen, "inverse_cdf")
        if step + 1 < steps:
            states = getattr(out, "cache", None)
            states = out.past_key_values if states is None else states
            out = model(tokens, use_cache=True, **{cache_arg: states})
    return time.perf_counter() - t0, clock.seconds


async def measure(base, clock: ForwardClock, words: int, name: str, repeats: int) -> dict:
    label, n = rt.WORKLOADS[name]
    llm = base.spawn()
    llm.set_prompt_from_str(" ".join(WORDS[i % len(WORDS)] for i in range(words)))
    prompt = list(llm.prompt_ids)
    sampler = rt.sampler_for(llm, name)
    await rt.smc_seconds(llm, sampler, n, 0)  # warm-up
    decode_floor(base.model.model, clock, prompt, n, rt.STEPS, 0)
    smc, fwd, floor, floor_fwd = [], [], [], []
    for r in range(repeats):
        s, f = decode_floor(base.model.model, clock, prompt, n, rt.STEPS, r + 1)
        floor.append(s / rt.STEPS)
        floor_fwd.append(f / rt.STEPS)
        clock.seconds = 0.0
        wall, steps = await rt.smc_seconds(llm, sampler, n, r + 1)
        smc.append(wall / steps)
        fwd.append(clock.seconds / steps)
    med = lambda xs: 1e3 * statistics.median(xs)  # noqa: E731
    return {
        "workload": label,
        "prompt_tokens": len(prompt),
        "smc_ms": med(smc),
        "forward_ms": med(fwd),
        "host_ms": med([a - b for a, b in zip(smc, fwd)]),
        "floor_ms": med(floor),
        "floor_forward_ms": med(floor_fwd),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="2,300,900", help="prompt lengths in words (about one token each)")
    ap.add_argument("--only", default="unconstrained,regex", help="workloads: unconstrained, regex")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = rt.load("tekken", ["hf"])["hf"]
    clock = ForwardClock(base.model.model)
    gc.freeze()  # as run.py: the loaded objects out of the collector's walks
    print("| workload | prompt tokens | SMC ms/step | forward ms/step | host ms/step | decode floor ms/step | its forward |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.only.split(","):
        for words in (int(w) for w in args.prompts.split(",")):
            r = await measure(base, clock, words, name, args.repeats)
            print(
                f"| {r['workload']} | {r['prompt_tokens']} | {r['smc_ms']:.2f} | {r['forward_ms']:.2f} | "
                f"**{r['host_ms']:.2f}** | {r['floor_ms']:.2f} | {r['floor_forward_ms']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
