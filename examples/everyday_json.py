"""A realistic JSON schema on the documented path for generation, checked with `jsonschema`.

    python examples/everyday_json.py

A user record with a nested object, an enum, integer bounds, an array, a `pattern`
and a `date` format, sampled with `AWRS(llm, JsonSchema(SCHEMA,
spelling="canonical").coerce(llm, f=b"".join))`. The canonical spelling (no whitespace
outside strings, each string spelled as a JSON writer spells it) keeps the small
model from writing whitespace until `max_tokens`; `benchmarks/everyday_runs.py` measures it
against the other spellings over seeds (docs/performance.md, "Everyday runs").
"""

import asyncio
import json

import jsonschema

from genlm.control import AWRS, JsonSchema, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "role": {"enum": ["admin", "user", "guest"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "born": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "zip": {"type": "integer", "minimum": 10000, "maximum": 99999},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "role", "age", "born", "address"],
    "additionalProperties": False,
}


async def main(n_particles: int = 10, max_tokens: int = 200, seed: int = 0):
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("A user record as JSON:\n")
    sampler = AWRS(llm, JsonSchema(SCHEMA, spelling="canonical").coerce(llm, f=b"".join))
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, seed=seed
    )
    checker = jsonschema.FormatChecker()
    for text, p in sequences.decoded_posterior.items():
        if p > 0:  # entries of weight zero are dead particles' (unfinished) texts
            jsonschema.validate(json.loads(text), SCHEMA, format_checker=checker)
            print(f"{p:.3f}  {text}")
    print(f"log_ml = {sequences.log_ml:.3f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
