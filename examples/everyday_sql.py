"""An SQL-like Lark grammar on the documented default path.

    python examples/everyday_sql.py

`AWRS(llm, BoolCFG.from_lark(SQL).coerce(llm, f=b"".join))` with `max_tokens=40`.
The grammar has no recursion but Lark's repeats, so the engine coercion reads the
token budget off its byte automaton (`BoolCFG.regular_form`), exactly: a particle
near the horizon may only write tokens after which ` FROM name;` still fits.
`benchmarks/everyday_runs.py` measures it over seeds (docs/performance.md).
"""

import asyncio

from genlm.control import AWRS, BoolCFG, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL

SQL = r"""
start: "SELECT " cols " FROM " NAME where? ";"
cols: NAME (", " NAME)*
where: " WHERE " NAME OP VALUE
OP: "=" | "<" | ">"
NAME: /[a-z_]+/
VALUE: /[0-9]+/
"""


async def main(n_particles: int = 10, max_tokens: int = 40, seed: int = 0):
    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    llm.set_prompt_from_str("A query:\n")
    sampler = AWRS(llm, BoolCFG.from_lark(SQL).coerce(llm, f=b"".join))
    sequences = await sampler.smc(
        n_particles=n_particles, ess_threshold=0.5, max_tokens=max_tokens, seed=seed
    )
    for text, p in sequences.decoded_posterior.items():
        if p > 0:  # entries of weight zero are dead particles' (unfinished) texts
            print(f"{p:.3f}  {text}")
    print(f"log_ml = {sequences.log_ml:.3f}")
    return sequences


if __name__ == "__main__":
    asyncio.run(main())
