"""Particles that end with weight zero, AWRS against the direct sampler, on the embedded model.

Condition: the regex `" [a-z]+( [a-z]+){1,4}\\."` (two to five lowercase words and a
period) coerced to the LM; prompt "The words are"; N = 8, `max_tokens=25`,
`ess_threshold=0.5`, seeds 0..11 (96 particles). A particle is dead when its final log
weight is `-inf`: its sampler found no allowed token (AWRS's search gave up, or the
allowed mass is zero), or EOS was forced at `max_tokens` before the regex could end.

With the run's token budget (`smc(..., budget_aware=True)`, the default) no token is
drawn after which the regex cannot end within `max_tokens`; `--budget on,off` runs both.

`--task json` and `--task lark` measure a first JSON-schema run and a first Lark run
instead (`TASKS`): a two-key object schema and a small list grammar, coerced the
default way (the compiled engine), at `--max-tokens` (default: the task's);
`json-closed` the schema without other keys, `json-canonical` and
`json-closed-canonical` the same in the canonical spelling;
`--task smiles` the SMILES-like grammar of `benchmarks/grammars/` (for the bound's cost).

    python benchmarks/awrs_dead_particles.py [--seeds 12] [--reference] [--budget on,off] [--end-twist none,1e-3]
    python benchmarks/awrs_dead_particles.py --task json --max-tokens 14 --budget on,off
    python benchmarks/awrs_dead_particles.py --task lark --max-tokens 12 --budget on,off
    /tmp/v041/bin/python benchmarks/awrs_dead_particles.py --model /tmp/tinymodel/tiny
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import time
from pathlib import Path

import numpy as np
from awrs_common import (
    AUTOMATON,
    ENGINES,
    SEEDED,
    VERSION,
    coerce,
    engine_name,
    load_llm,
    run_many,
    samplers_of,
    text_of,
)

from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema, direct_token_sampler

PROMPT = "The words are"
PATTERN = r" [a-z]+( [a-z]+){1,4}\."
N_PARTICLES = 8
MAX_TOKENS = 25

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
LARK = r"""
start: "[" item ("," item)* "]"
item: NUMBER | WORD
NUMBER: /[0-9]+/
WORD: /[a-z]+/
"""


def _json_ok(text: bytes) -> bool:
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and {"name", "age"} <= set(doc)  # (other keys only where the schema allows them)
        and isinstance(doc["name"], str)
        and type(doc["age"]) is int
    )


# task: (prompt, condition, max_tokens, whether a finished text is in the language)
TASKS = {
    "regex": (
        PROMPT,
        lambda: BoolFSA.from_regex(PATTERN),
        MAX_TOKENS,
        lambda t: re.fullmatch(PATTERN.encode(), t) is not None,
    ),
    "json": ("A person as JSON:", lambda: JsonSchema(SCHEMA), 14, _json_ok),
    "smiles": (
        "SMILES:",
        lambda: BoolCFG.from_lark((Path(__file__).parent / "grammars" / "smiles.lark").read_text()),
        20,
        lambda t: True,  # the condition's own language; the row measures deaths and time
    ),
    "json-closed": (
        "A person as JSON:",
        lambda: JsonSchema({**SCHEMA, "additionalProperties": False}),
        14,
        _json_ok,
    ),
    # the spelling docs/potentials.md recommends for generation (no whitespace, one
    # spelling per string)
    "json-canonical": (
        "A person as JSON:",
        lambda: JsonSchema(SCHEMA, spelling="canonical"),
        14,
        _json_ok,
    ),
    "json-closed-canonical": (
        "A person as JSON:",
        lambda: JsonSchema({**SCHEMA, "additionalProperties": False}, spelling="canonical"),
        14,
        _json_ok,
    ),
    "lark": (
        "A list:",
        lambda: BoolCFG.from_lark(LARK),
        12,
        lambda t: re.fullmatch(rb"\[([0-9]+|[a-z]+)(,([0-9]+|[a-z]+))*\]", t) is not None,
    ),
}


def count(runs: list, in_language=None) -> tuple[int, int, int, float, float]:
    """Dead particles, particles in all, live ones whose text is off the language, mean
    finite log_ml, and the mean number of distinct strings among a run's live particles."""
    dead = total = outside = 0
    distinct = []
    for seqs in runs:
        live = {text_of(c) for c, w in zip(seqs.contexts, seqs.log_weights) if w > -math.inf}
        distinct.append(len(live))
        for context, logw in zip(seqs.contexts, seqs.log_weights):
            total += 1
            if logw == -math.inf:
                dead += 1
            elif not (in_language or TASKS["regex"][3])(text_of(context)):
                outside += 1
    finite = [s.log_ml for s in runs if s.log_ml > -math.inf]
    return (
        dead,
        total,
        outside,
        float(np.mean(finite)) if finite else -math.inf,
        float(np.mean(distinct)),
    )


async def reference_run(target, rng: np.random.Generator) -> np.ndarray:
    """Final log weights of one run of a plain SMC loop with direct draws: each live
    particle draws `y ∝ target.logw_next(x)` and adds `log Σ_y target.logw_next(x)[y]`,
    EOS is forced after `MAX_TOKENS - 1` tokens, and the whole population is resampled
    (multinomial, weights set to their mean) when the ESS falls below N/2."""
    eos = len(target.vocab_eos) - 1
    contexts: list[list] = [[] for _ in range(N_PARTICLES)]
    logw, done = np.zeros(N_PARTICLES), np.zeros(N_PARTICLES, dtype=bool)
    while not done.all():
        live = np.flatnonzero(~done)
        rows = await target.batch_logw_next([contexts[i] for i in live])
        for i, row in zip(live, rows):
            row = np.asarray(row.weights)
            k = eos
            if len(contexts[i]) < MAX_TOKENS - 1:
                z = np.logaddexp.reduce(row)
                p = np.exp(row - z)
                k = int(rng.choice(len(p), p=p / p.sum()))
                logw[i] += z
            else:
                logw[i] += row[eos]
            contexts[i] = contexts[i] + [target.vocab_eos[k]]
            done[i] = k == eos
        top = np.logaddexp.reduce(logw)
        if not done.all() and top > -math.inf:
            w = np.exp(logw - top)
            if 1.0 / np.sum(w**2) < 0.5 * N_PARTICLES:
                ancestors = rng.choice(N_PARTICLES, size=N_PARTICLES, p=w / w.sum())
                contexts, done = [list(contexts[a]) for a in ancestors], done[ancestors]
                logw = np.full(N_PARTICLES, top - math.log(N_PARTICLES))
    return logw


async def reference_row(llm, fsa, seeds: int) -> str:
    target = llm * coerce(fsa, llm, AUTOMATON)
    finals = [await reference_run(target, np.random.default_rng(1000 + s)) for s in range(seeds)]
    dead = sum(int(np.sum(f == -math.inf)) for f in finals)
    some = sum(bool(np.any(f == -math.inf)) for f in finals)
    return f"| reference loop | {engine_name(AUTOMATON)} | | {dead}/{N_PARTICLES * seeds} | {some}/{seeds} | | | | | |"


def final_ess(log_weights) -> float:
    """`1 / Σ w_i²` of the normalized final weights, over N (0: every weight zero)."""
    logw = np.asarray(log_weights, dtype=np.float64)
    if not np.isfinite(logw).any():
        return 0.0
    w = np.exp(logw - logw.max())
    w /= w.sum()
    return float(1.0 / np.sum(w**2) / len(w))


async def main(args) -> None:
    prompt, make, max_tokens, in_language = TASKS[args.task]
    max_tokens = args.max_tokens or max_tokens
    llm = load_llm(args.model, prompt)
    fsa = make()
    print(
        f"genlm-control {VERSION}; task {args.task}; prompt {prompt!r}, N = {N_PARTICLES}, max_tokens = {max_tokens}, "
        f"ESS 0.5, seeds 0..{args.seeds - 1}\n"
    )
    print(
        "| sampler | coercion | budget | condition tokens | dead / particles | runs with a dead particle "
        "| runs with Ẑ = 0 | live off the language | mean finite log_ml | distinct live strings / run "
        "| final ESS / N | s | CPU s |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    engines = ENGINES
    if args.engines:
        names = {engine_name(e).split(",")[0] if e != "search" else "search": e for e in ENGINES}
        engines = [names[x] for x in args.engines.split(",")]
    for engine in engines:
        condition = coerce(fsa, llm, engine)
        if SEEDED:  # the bound's one-time set-up (the engine path's generic twin), outside the runs
            from genlm.control.potential import fast_paths

            cpu = time.process_time()
            fast_paths.tokens_to_finish(condition)
            print(
                f"<!-- {engine_name(engine)}: bound set up in {time.process_time() - cpu:.2f} s CPU -->"
            )
        for name in samplers_of(engine):
            sampler = (
                AWRS(llm, condition) if name == "awrs" else direct_token_sampler(llm * condition)
            )
            for budget, twist in [
                (b, t) for b in (args.budget if SEEDED else [None]) for t in args.end_twist
            ]:
                extra = {} if budget is None else {"budget_aware": budget}
                if twist is not None:
                    extra["end_twist"] = twist
                start, cpu = time.perf_counter(), time.process_time()
                runs = await run_many(
                    sampler,
                    range(args.seeds),
                    n_particles=N_PARTICLES,
                    ess_threshold=0.5,
                    max_tokens=max_tokens,
                    **extra,
                )
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                dead, total, outside, log_ml, distinct = count(runs, in_language)
                zero = sum(s.log_ml == -math.inf for s in runs)
                some = sum(any(w == -math.inf for w in s.log_weights) for s in runs)
                label = {True: "on", False: "off", None: "-"}[budget]
                label += "" if twist is None else f", end_twist {twist:g}"
                ess = np.mean([final_ess(s.log_weights) for s in runs])
                print(
                    f"| {name} | {engine_name(engine)} | {label} | {len(condition.vocab)} | {dead}/{total} | "
                    f"{some}/{len(runs)} | {zero}/{len(runs)} | {outside} | {log_ml:.2f} | {distinct:.1f} | "
                    f"{ess:.2f} | {seconds:.1f} | {cpu:.1f} |",
                    flush=True,
                )
    if args.reference and args.task == "regex":
        print(await reference_row(llm, fsa, args.seeds), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument(
        "--reference", action="store_true", help="also run a plain reference SMC loop"
    )
    parser.add_argument(
        "--budget",
        type=lambda s: [x == "on" for x in s.split(",")],
        default=[True],
        help="budget_aware settings to run: on, off or on,off",
    )
    parser.add_argument(
        "--end-twist",
        type=lambda s: [None if x == "none" else float(x) for x in s.split(",")],
        default=[None],
        help="SMC(...)(..., end_twist=) values: none or numbers in (0, 1]",
    )
    parser.add_argument("--task", choices=sorted(TASKS), default="regex")
    parser.add_argument("--max-tokens", type=int, default=None, help="default: the task's")
    parser.add_argument(
        "--engines", default=None, help="comma list of engine, automaton, search (default: all)"
    )
    parser.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    asyncio.run(main(parser.parse_args()))
