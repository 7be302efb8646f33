"""Several SMC runs at once on one model, with `asyncio.gather`.

    python examples/concurrent_runs.py

Each prompt gets its own `llm.spawn()` (a copy over the same loaded model: no
second copy of the weights). The runs' LM calls made in one pass of the event
loop are served together, so the model sees one batched forward per step for all
particles of all runs. Each run has its own seed, so the whole batch of runs is
reproducible.
"""

import asyncio

from genlm.control import AWRS, BoolFSA, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL

PROMPTS = ["The value of x is", "The result is", "The index is"]


async def run(llm: PromptedLLM, prompt: str, seed: int):
    llm = llm.spawn()
    llm.set_prompt_from_str(prompt)
    number = BoolFSA.from_regex(r" [0-9]+\.").coerce(llm, f=b"".join)
    sampler = AWRS(llm, number)
    return await sampler.smc(n_particles=6, ess_threshold=0.5, max_tokens=12, seed=seed)


async def main():
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    results = await asyncio.gather(*(run(llm, p, seed=i) for i, p in enumerate(PROMPTS)))
    for prompt, sequences in zip(PROMPTS, results):
        best = max(sequences.decoded_posterior.items(), key=lambda kv: kv[1], default=None)
        print(f"{prompt!r}: log_ml = {sequences.log_ml:.3f}, most probable {best}")
    return dict(zip(PROMPTS, results))


if __name__ == "__main__":
    asyncio.run(main())
