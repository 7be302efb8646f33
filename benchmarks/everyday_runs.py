"""Everyday structured generation on the embedded model: does the documented path
finish? (issue 37)

Two workloads, each over 5 seeds on `genlm.control.embedded.EMBEDDED_MODEL`:

- JSON: `AWRS(llm, JsonSchema(SCHEMA, spelling=s).coerce(llm, f=b"".join))`, N=10,
  `max_tokens=200`, for each spelling (`canonical`, the documented one for generation;
  `compact`; `any`, `JsonSchema`'s default and 0.4.1's language). A seed counts as finished when at least one particle of
  positive weight holds a complete document, and as valid when that document passes
  `jsonschema` with its `FormatChecker`.
- SQL: `AWRS(llm, BoolCFG.from_lark(SQL).coerce(llm, f=b"".join))`, N=10,
  `max_tokens=40`; a seed counts as all-dead when every particle ends with weight zero.

Run:
    python benchmarks/everyday_runs.py [--json-only | --sql-only] [--seeds 5]
Prints one line per configuration: finished/valid (or all-dead) seeds out of the seeds
run, the mean seconds per run, and the load (`os.getloadavg`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from everyday_json import SCHEMA  # noqa: E402  (the examples' schema and grammar, one source)
from everyday_sql import SQL  # noqa: E402

JSON_PROMPT = "A user record as JSON:\n"

SQL_PROMPT = "A query:\n"


def valid_documents(sequences) -> tuple[int, int]:
    """(complete documents, valid ones) among the particles of positive weight."""
    import jsonschema

    checker = jsonschema.FormatChecker()
    done = ok = 0
    for text, p in sequences.decoded_posterior.items():
        if p <= 0:
            continue
        done += 1
        try:
            jsonschema.validate(json.loads(text), SCHEMA, format_checker=checker)
            ok += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    return done, ok


async def run_json(llm, spelling: str, seed: int):
    from genlm.control import AWRS, JsonSchema

    sampler = AWRS(llm, JsonSchema(SCHEMA, spelling=spelling).coerce(llm, f=b"".join))
    return await sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=200, seed=seed)


async def run_sql(llm, seed: int):
    from genlm.control import AWRS, BoolCFG

    sampler = AWRS(llm, BoolCFG.from_lark(SQL).coerce(llm, f=b"".join))
    return await sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=40, seed=seed)


def load() -> str:
    return "load %.1f %.1f %.1f" % os.getloadavg()


async def main(seeds: int, do_json: bool, do_sql: bool, spellings: list[str]) -> None:
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL)
    warnings.simplefilter("ignore")
    if do_json:
        llm.set_prompt_from_str(JSON_PROMPT)
        for spelling in spellings:
            finished = valid = 0
            t0 = time.perf_counter()
            for seed in range(seeds):
                seqs = await run_json(llm, spelling, seed)
                done, ok = valid_documents(seqs)
                finished += done > 0
                valid += ok > 0
                best = max(seqs.decoded_posterior.items(), key=lambda kv: kv[1])[0]
                print(
                    f"  json {spelling} seed {seed}: {done} docs, {ok} valid; e.g. {best[:90]!r}",
                    flush=True,
                )
            dt = (time.perf_counter() - t0) / seeds
            print(
                f"JSON spelling={spelling}: finished {finished}/{seeds}, valid {valid}/{seeds}, "
                f"{dt:.1f} s/run, {load()}",
                flush=True,
            )
    if do_sql:
        llm.set_prompt_from_str(SQL_PROMPT)
        dead = 0
        t0 = time.perf_counter()
        for seed in range(seeds):
            seqs = await run_sql(llm, seed)
            alive = [t for t, p in seqs.decoded_posterior.items() if p > 0]
            dead += not alive
            print(
                f"  sql seed {seed}: {len(alive)} texts alive, log_ml {seqs.log_ml:.2f}; "
                f"e.g. {(alive or [''])[0]!r}",
                flush=True,
            )
        dt = (time.perf_counter() - t0) / seeds
        print(
            f"SQL: all particles dead in {dead}/{seeds} seeds, {dt:.1f} s/run, {load()}", flush=True
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json-only", action="store_true")
    parser.add_argument("--sql-only", action="store_true")
    parser.add_argument("--spellings", default="canonical,compact,any")
    a = parser.parse_args()
    asyncio.run(main(a.seeds, not a.sql_only, not a.json_only, a.spellings.split(",")))
