"""Generate text that matches a regular expression, by SMC with AWRS.

    python examples/regex_digits.py

The posterior is `p(x) ∝ LM(x | prompt) · [x matches the regex]`. AWRS draws
tokens from the LM and checks only the drawn ones against the regex.
"""

import asyncio

from genlm.control import AWRS, BoolFSA, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL


async def main(n_particles: int = 10, max_tokens: int = 16, seed: int = 0):
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The value of x is")
    # The FSA is over bytes; coerce it to the LM's byte-string tokens.
    number = BoolFSA.from_regex(r" [0-9]+\.").coerce(llm, f=b"".join)
    sampler = AWRS(llm, number)
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, seed=seed
    )
    for text, p in sequences.decoded_posterior.items():
        print(f"{p:.3f}  {text!r}")
    print(f"log_ml = {sequences.log_ml:.3f}, ESS = {sequences.ess_before_resample:.2f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
