"""CPU time of the token budget against the compiled engine's own work, per SMC step.

On the default coercion (the compiled engine) of each task of `awrs_dead_particles.py`
(`TASKS`: the regex, the two-key JSON schema, the list grammar, the SMILES-like
grammar), SMC runs with the budget on; the condition's methods are timed
(`time.process_time`) as they are called: the bound (`batch_tokens_to_finish` and
`batch_most_tokens_to_finish`, which read the generic twin) against everything the
engine answers (rows, masks, set checks, prefix and complete). The twin's one-time
set-up is timed apart. With `--rounds K` the seeds are run K times on the same
condition and only the last round is reported: the states its runs meet have been
seen, as in a long session.

    python benchmarks/budget_step_cost.py [--seeds 6] [--rounds 1] [--tasks regex,json,lark,smiles]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from awrs_common import load_llm, run_many
from awrs_dead_particles import N_PARTICLES, TASKS

from genlm.control import AWRS, direct_token_sampler
from genlm.control.potential import fast_paths

ENGINE_METHODS = (
    "batch_logw_next",
    "logw_next",
    "batch_allowed",
    "allowed_next",
    "prefix",
    "complete",
    "batch_prefix",
    "batch_complete",
)


def timed(condition, spent: dict) -> None:
    """Wrap the condition's engine methods and its bound, adding CPU seconds to `spent`."""

    def wrap(name: str, key: str) -> None:
        inner = getattr(condition, name)

        async def call(*args, **kwargs):
            start = time.process_time()
            try:
                return await inner(*args, **kwargs)
            finally:
                spent[key] += time.process_time() - start

        setattr(condition, name, call)

    for name in ENGINE_METHODS:
        wrap(name, "engine")
    wrap("_tokens_to_finish", "bound")
    if hasattr(condition, "_most_tokens_to_finish"):
        wrap("_most_tokens_to_finish", "bound")


async def main(args) -> None:
    print(
        f"N = {N_PARTICLES}, ESS 0.5, seeds 0..{args.seeds - 1}, round {args.rounds} of {args.rounds}, "
        "budget on, default coercion\n"
    )
    print(
        "| task | sampler | max_tokens | set-up s | engine CPU s | bound CPU s | bound / engine |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for task in args.tasks.split(","):
        prompt, make, max_tokens, _ = TASKS[task]
        llm = load_llm(args.model, prompt)
        for name in ("direct", "awrs"):
            condition = make().coerce(llm, f=b"".join)
            start = time.process_time()
            fast_paths.tokens_to_finish(condition)
            setup = time.process_time() - start
            spent = {"engine": 0.0, "bound": 0.0}
            timed(condition, spent)
            sampler = (
                AWRS(llm, condition) if name == "awrs" else direct_token_sampler(llm * condition)
            )
            for _ in range(args.rounds):
                spent.update(engine=0.0, bound=0.0)  # only the last round is reported
                await run_many(
                    sampler,
                    range(args.seeds),
                    n_particles=N_PARTICLES,
                    ess_threshold=0.5,
                    max_tokens=max_tokens,
                )
            ratio = spent["bound"] / spent["engine"] if spent["engine"] else float("nan")
            print(
                f"| {task} | {name} | {max_tokens} | {setup:.2f} | {spent['engine']:.2f} | "
                f"{spent['bound']:.2f} | {ratio:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="run the seeds K times; report the last")
    parser.add_argument("--tasks", default="regex,json,lark,smiles")
    parser.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    asyncio.run(main(parser.parse_args()))
