"""Generate JSON documents that are valid under a JSON Schema.

    python examples/json_schema.py

`JsonSchema(schema)` is a Boolean potential over bytes that accepts exactly the
documents valid under the schema and rejects a prefix as soon as no valid
document extends it. Coerced to the LM's tokens, it is the condition of AWRS.
"""

import asyncio
import json

from genlm.control import AWRS, BoolFSA, JsonSchema, PromptedLLM
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
    # The schema allows whitespace wherever JSON does; the tiny model would spend its
    # tokens on it, so a second constraint allows only single spaces between
    # non-blank bytes.
    valid = JsonSchema(SCHEMA).coerce(llm, f=b"".join)
    compact = BoolFSA.from_regex(r"\{( ?[^ \n\r\t])*").coerce(llm, f=b"".join)
    sampler = AWRS(llm, valid * compact)
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, seed=seed
    )
    for text, p in sequences.decoded_posterior.items():
        print(f"{p:.3f}  {text!r}  ->  {json.loads(text)}")
    print(f"log_ml = {sequences.log_ml:.3f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
