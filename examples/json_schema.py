"""Generate JSON documents that are valid under a JSON Schema.

    python examples/json_schema.py

`JsonSchema(schema)` is a Boolean potential over bytes that accepts exactly the
documents valid under the schema and rejects a prefix as soon as no valid
document extends it. Coerced to the LM's tokens it computes a whole token mask per
step, so the direct sampler over the product `LM · constraints` draws each token
from the LM restricted to the allowed tokens, weighted by the allowed mass.
"""

import asyncio
import json

from genlm.control import JsonSchema, PromptedLLM, direct_token_sampler
from genlm.control.embedded import EMBEDDED_MODEL

SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["x"],
    "additionalProperties": False,
}


async def main(n_particles: int = 10, max_tokens: int = 20, seed: int = 0):
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("The value of x is given by")
    # The canonical spelling allows no whitespace outside strings and spells each
    # string one way, so the tiny model cannot spend its tokens on whitespace or
    # escapes (the default, spelling="any", allows RFC 8259 whitespace: 0.4.1's language).
    valid = JsonSchema(SCHEMA, spelling="canonical").coerce(llm, f=b"".join)
    sampler = direct_token_sampler(llm * valid)
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, seed=seed
    )
    for text, p in sequences.decoded_posterior.items():
        if p > 0:  # entries of weight zero are dead particles' (unfinished) texts
            print(f"{p:.3f}  {text!r}  ->  {json.loads(text)}")
    print(f"log_ml = {sequences.log_ml:.3f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
