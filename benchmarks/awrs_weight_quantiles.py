"""Single-draw AWRS weights relative to the exact local normalizer, on the embedded model.

At a fixed context `x` of the exactness target (prompt "The value is", the regex
`" (a|an|the)( (a|an|the)){0,2}\\."` coerced to the LM), one AWRS draw `(y, w)` is
properly weighted: `E[w] = Z_x = Σ_y LM.logw_next(x)[y] · c(x y)` (EOS included), so
`w / Z_x` has mean 1. Its spread is what SMC's resampling sees: a median far below 1
with a long right tail makes resampling keep the wrong particles. For each context this
prints the mean (± standard error), median, 90th and 99th percentiles and the maximum
of `w / Z_x` over `--draws` draws, with `Z_x` from the LM's and the condition's
`logw_next`.

    python benchmarks/awrs_weight_quantiles.py [--draws 2000]
    /tmp/v041/bin/python benchmarks/awrs_weight_quantiles.py --model /tmp/tinymodel/tiny
"""

from __future__ import annotations

import argparse
import asyncio
import math

import numpy as np
from awrs_common import ENGINES, SEEDED, VERSION, coerce, engine_name, load_llm, token_bytes

from genlm.control import AWRS, BoolFSA

PROMPT = "The value is"
PATTERN = r" (a|an|the)( (a|an|the)){0,2}\."
CONTEXTS = ((), (b" a",), (b" a", b"."), (b" the",), (b" an", b" the"))


def tokens_of(llm, pieces) -> list:
    by_bytes = {}
    for token in llm.vocab:
        by_bytes.setdefault(token_bytes(token), token)
    return [by_bytes[p] for p in pieces]


async def local_log_z(target, context) -> float:
    """`log Z_x = logsumexp_y (LM * c).logw_next(x)[y]`."""
    return float(np.logaddexp.reduce(np.asarray((await target.logw_next(context)).weights)))


async def draws(sampler, context, n: int, group: int = 100) -> np.ndarray:
    out = []
    for start in range(0, n, group):
        got = await asyncio.gather(
            *(sampler.sample(list(context)) for _ in range(min(group, n - start)))
        )
        out += [float(logw) for _, logw, _ in got]
    return np.array(out)


async def main(args) -> None:
    llm = load_llm(args.model, PROMPT)
    fsa = BoolFSA.from_regex(PATTERN)
    print(
        f"genlm-control {VERSION}; {args.draws} AWRS draws per context (sampler seed {args.seed})\n"
    )
    print("| coercion | context | log Z_x | mean w/Z_x ± σ | median | p90 | p99 | max | P(w=0) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    target = llm * coerce(fsa, llm, False if SEEDED else "0.4.1")
    for engine in ENGINES:
        condition = coerce(fsa, llm, engine)
        sampler = AWRS(llm, condition, seed=args.seed)
        for pieces in CONTEXTS:
            context = tokens_of(llm, pieces)
            log_z = await local_log_z(target, context)
            r = np.exp(await draws(sampler, context, args.draws) - log_z)
            q50, q90, q99 = np.quantile(r, [0.5, 0.9, 0.99])
            se = r.std(ddof=1) / math.sqrt(len(r))
            name = repr(b"".join(pieces).decode())
            print(
                f"| {engine_name(engine)} | {name} | {log_z:.2f} | {r.mean():.3f} ± {se:.3f} | {q50:.3f} | "
                f"{q90:.3f} | {q99:.3f} | {r.max():.2f} | {np.mean(r == 0):.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    asyncio.run(main(parser.parse_args()))
