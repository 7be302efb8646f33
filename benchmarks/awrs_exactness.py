"""E[Ẑ/Z] of the direct sampler and AWRS on the embedded model, against the exact Z.

The target of `tests/sampler/test_exactness_llm.py`: prompt "The value is", the regex
`" (a|an|the)( (a|an|the)){0,2}\\."` coerced to the LM, `max_tokens=8`, N = 6. For
each sampler, coercion, ESS threshold and budget setting (`smc(..., budget_aware=)`),
prints the mean of `Ẑ/Z = exp(log_ml - log Z)` over seeded runs with its standard
error, the quantiles of `Ẑ/Z` (10%, median, 90%, 99%, max), the runs with `Ẑ = 0`,
and the Ẑ-weighted posterior of the three likeliest strings (exact values in the
header; `log Z` from `genlm.control.testing.enumerate_target`), with the wall and CPU
seconds of the row's runs.

`--end-twist` picks `smc(..., end_twist=)`: `default` (None: the cost of ending after
each particle's context, the LM's EOS entry there), `off` (False: no twist) or a
constant factor in (0, 1]; `--coercions engine,automaton,search` picks the conditions.

    python benchmarks/awrs_exactness.py [--runs 240] [--ess 0,0.5] [--budget on,off] [--end-twist off,default,1e-3]
    /tmp/v041/bin/python benchmarks/awrs_exactness.py --model /tmp/tinymodel/tiny --log-z -19.0345

Under genlm-control 0.4.1 pass `--log-z` (the exact value this script prints here).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time

import numpy as np
from awrs_common import (
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

from genlm.control import AWRS, BoolFSA, direct_token_sampler

PROMPT = "The value is"
PATTERN = r" (a|an|the)( (a|an|the)){0,2}\."
TOP = (b" an.", b" a.", b" the.")


async def exact_target(llm):
    """`(log Z, posterior)` by enumeration through the automaton's coercion."""
    from genlm.control.testing import enumerate_target

    condition = BoolFSA.from_regex(PATTERN).coerce(llm, f=b"".join, engine=False)
    exact = await enumerate_target(llm, 8, condition=condition)
    return exact.log_z, exact.posterior


async def measure(sampler, runs: int, ess: float, log_z: float, budget: bool | None, twist=None) -> str:
    start, cpu = time.perf_counter(), time.process_time()
    extra = {} if budget is None else {"budget_aware": budget}
    if twist != "default":
        extra["end_twist"] = twist
    out = await run_many(sampler, range(runs), n_particles=6, ess_threshold=ess, max_tokens=8, **extra)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    ratios = np.array([math.exp(s.log_ml - log_z) for s in out])
    sigma = ratios.std(ddof=1) / math.sqrt(runs)
    q = " / ".join(f"{v:.2f}" for v in np.quantile(ratios, [0.1, 0.5, 0.9, 0.99])) + f" / {ratios.max():.1f}"
    zero = int(np.sum(ratios == 0))
    mass = dict.fromkeys(TOP, 0.0)
    for seqs in out:
        n = len(seqs.log_weights)
        for context, logw in zip(seqs.contexts, seqs.log_weights):
            text = text_of(context)
            if text in mass and logw > -math.inf:
                mass[text] += math.exp(logw - log_z) / (n * runs)
    posterior = " / ".join(f"{mass[t]:.2f}" for t in TOP)
    return f"{ratios.mean():.3f} ± {sigma:.3f} | {q} | {zero}/{runs} | {posterior} | {seconds:.0f} / {cpu:.0f}"


async def main(args) -> None:
    llm = load_llm(args.model, PROMPT)
    if args.log_z is None:
        log_z, posterior = await exact_target(llm)
        exact = " / ".join(f"{posterior[t]:.2f}" for t in TOP)
        print(f"exact: log Z = {log_z:.4f}; posterior of {' / '.join(map(repr, TOP))} = {exact}")
    else:
        log_z = args.log_z
    print(f"genlm-control {VERSION}, {args.runs} runs, N = 6, max_tokens = 8\n")
    print(
        "| sampler | coercion | ESS threshold | budget | end_twist | E[Ẑ/Z] ± σ "
        "| Ẑ/Z p10 / p50 / p90 / p99 / max | Ẑ = 0 | posterior an. / a. / the. | s wall / CPU |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    fsa = BoolFSA.from_regex(PATTERN)
    for engine in ENGINES:
        if SEEDED and _coercion(engine) not in args.coercions:
            continue
        condition = coerce(fsa, llm, engine)
        for name in samplers_of(engine):
            sampler = (
                direct_token_sampler(llm * condition) if name == "direct" else AWRS(llm, condition)
            )
            for ess in args.ess:
                for budget in args.budget if SEEDED else [None]:
                    for twist in args.end_twist if SEEDED else ["default"]:
                        row = await measure(sampler, args.runs, ess, log_z, budget, twist)
                        label = {True: "on", False: "off", None: "-"}[budget]
                        tw = twist if isinstance(twist, str) else "off" if twist is False else f"{twist:g}"
                        print(f"| {name} | {engine_name(engine)} | {ess} | {label} | {tw} | {row} |", flush=True)


def _coercion(engine) -> str:
    """The `--coercions` name of an `ENGINES` entry."""
    return {None: "engine", False: "automaton", "search": "search"}[engine]


def _twist(text: str):
    """An `--end-twist` value: "default" (the keyword left out), "off" (False) or a number."""
    return text if text == "default" else False if text == "off" else float(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=240)
    parser.add_argument(
        "--ess", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.5]
    )
    parser.add_argument(
        "--budget", type=lambda s: [x == "on" for x in s.split(",")], default=[True, False],
        help="budget_aware settings to run: on, off or on,off",
    )
    parser.add_argument(
        "--end-twist", type=lambda s: [_twist(x) for x in s.split(",")],
        default=["default"], help="SMC(...)(..., end_twist=) values: default, off or numbers in (0, 1]",
    )
    parser.add_argument(
        "--coercions", type=lambda s: s.split(","), default=["engine", "automaton", "search"],
        help="conditions to run: engine, automaton, search (AWRS's search path)",
    )
    parser.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    parser.add_argument(
        "--log-z", type=float, default=None, help="exact log Z (needed without seeding)"
    )
    args = parser.parse_args()
    if args.log_z is None and not SEEDED:
        parser.error("--log-z is needed under this genlm-control version")
    asyncio.run(main(args))
