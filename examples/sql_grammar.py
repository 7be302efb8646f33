"""Generate queries of a small SQL-like language given as a Lark grammar.

    python examples/sql_grammar.py

`BoolCFG.from_lark(grammar)` is a Boolean potential over bytes: `prefix` is 0 when
some sentence of the grammar starts with the bytes, `complete` when they parse.
The character-level proposal (`eager_token_sampler`) walks the LM's token trie
byte by byte and only follows bytes the grammar allows.
"""

import asyncio

from genlm.control import BoolCFG, PromptedLLM, eager_token_sampler
from genlm.control.embedded import EMBEDDED_MODEL

GRAMMAR = r"""
start: "select " columns " from " table where?
columns: "*" | column ("," " "? column)*
column: "name" | "value" | "id"
table: "users" | "items"
where: " where " column " = " /[0-9]{1,3}/
"""


async def main(n_particles: int = 8, max_tokens: int = 20, seed: int = 0):
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("Query:")
    grammar = BoolCFG.from_lark(GRAMMAR)
    sampler = eager_token_sampler(llm, grammar)
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, seed=seed
    )
    for text, p in sequences.decoded_posterior.items():
        print(f"{p:.3f}  {text!r}")
    print(f"log_ml = {sequences.log_ml:.3f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
