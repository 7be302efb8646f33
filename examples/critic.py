"""A custom Python potential as a critic that twists SMC.

    python examples/critic.py

The target is `LM(x) · [x matches " [0-9]+\\."] · φ(x)` with a soft preference

    φ(x) = 0.1 ** (number of "0" bytes in x)

written as a `Potential` over bytes. As a critic, SMC multiplies each particle's
weight by `φ(prefix) / φ(previous prefix)` at every step (the twist telescopes to
`φ(x)` at the end), so particles that start writing zeros are resampled away early.
`genlm.control.testing.check_potential` proves that the potential keeps the
contract before it is used.
"""

import asyncio
import math

from genlm.control import AWRS, BoolFSA, Potential, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL
from genlm.control.testing import check_potential


class FewZeros(Potential):
    """`prefix(x) = complete(x) = log(penalty) · (number of zero bytes in x)`, over bytes."""

    def __init__(self, penalty: float = 0.1):
        super().__init__(list(range(256)))
        self.log_penalty = math.log(penalty)

    async def prefix(self, context):
        return self.log_penalty * sum(1 for b in context if b == ord("0"))

    async def complete(self, context):
        return await self.prefix(context)


async def main(n_particles: int = 20, max_tokens: int = 16, seed: int = 0):
    few_zeros = FewZeros()
    await check_potential(few_zeros, [[], list(b" 1"), list(b" 10"), list(b" 0.")])

    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The value of x is")
    number = BoolFSA.from_regex(r" [0-9]+\.").coerce(llm, f=b"".join)
    sampler = AWRS(llm, number)
    critic = few_zeros.coerce(llm, f=b"".join)
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, critic=critic, seed=seed
    )
    for text, p in sequences.decoded_posterior.items():
        print(f"{p:.3f}  {text!r}")
    print(f"log_ml = {sequences.log_ml:.3f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
