"""Structured workloads: per-step cost of the default coercion against the engine, and SMC.

For regex, JSON schema, the SQL-like Lark grammar and the OpenSMILES grammar
(`grammars/opensmiles.lark`), on the embedded model:

- `logw_next` of the default coercion (`coerce(llm, f=b"".join)`) and of the engine
  on the constraint as written (`engine=True`), on the same contexts: the prefixes
  of one text per workload, tokenized by longest match; each context is timed right
  after its parent on a fresh copy, so no row of it is cached; medians;
- AWRS SMC per run with the default coercion (N = 10, ESS 0.5, max_tokens = 32).

Runs unchanged under genlm-control 0.4.1 (then only the SMC column, with 0.4.1's own
coercion), so the two versions are timed on the same model:

    python benchmarks/structured.py --out a.json
    /work/venv-041/bin/python benchmarks/structured.py --model genlm/control/embedded/tiny --out b.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awrs_common import SEEDED, VERSION, load_llm, run_many  # noqa: E402
from workloads import JSON_SCHEMA, REGEX, SQL_GRAMMAR  # noqa: E402

from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema  # noqa: E402

HERE = Path(__file__).resolve().parent
# name: (prompt, constraint, a text of the language whose prefixes are the timed contexts)
WORKLOADS = {
    "regex": ("Summary:", lambda: BoolFSA.from_regex(REGEX), "The cat sat, then it ran. Then, the end."),
    "JSON": ("Data:", lambda: JsonSchema(JSON_SCHEMA), '{"name": "Ann Lee", "age": 31}'),
    "SQL-like Lark": ("Query:", lambda: BoolCFG.from_lark(SQL_GRAMMAR), "select name, id from users where id < 12"),
    "SMILES Lark": (
        "SMILES:",
        lambda: BoolCFG.from_lark((HERE / "grammars" / "opensmiles.lark").read_text()),
        " CC(=O)Oc1ccc[nH]1C(=O)[O-]",
    ),
}


def tokenize(llm, text: str) -> list:
    """`text` as the model's tokens by longest match."""
    by_bytes = {bytes(t): t for t in llm.vocab}
    longest = max(map(len, by_bytes))
    data, out, i = text.encode(), [], 0
    while i < len(data):
        k = next(k for k in range(min(longest, len(data) - i), 0, -1) if data[i : i + k] in by_bytes)
        out.append(by_bytes[data[i : i + k]])
        i += k
    return out


async def step_ms(coerced, contexts: list, repeats: int) -> float:
    """Median ms of `logw_next(ctx)` right after `logw_next(ctx[:-1])`, on fresh copies."""
    times = []
    for _ in range(repeats):
        p = coerced.spawn()
        await p.logw_next([])
        for c in contexts:
            await p.logw_next(c[:-1])
            t0 = time.perf_counter()
            await p.logw_next(c)
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


async def smc_s(llm, condition, repeats: int) -> float:
    """Median seconds per AWRS SMC run (after one warm-up run)."""
    sampler = AWRS(llm, condition)
    await run_many(sampler, [0], n_particles=10, ess_threshold=0.5, max_tokens=32)
    times = []
    for seed in range(1, repeats + 1):
        t0 = time.perf_counter()
        await run_many(sampler, [seed], n_particles=10, ess_threshold=0.5, max_tokens=32)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def measure(model: str | None, repeats: int, only: set | None = None) -> dict:
    """name → {"default_ms", "engine_ms", "default_class", "smc_s"} (our version; Lark
    also "written_ms": the engine on the grammar text as written), or name → {"smc_s"}
    (0.4.1)."""
    out = {}
    for name, (prompt, build, text) in WORKLOADS.items():
        if only and name not in only:
            continue
        llm = load_llm(model, prompt)
        row: dict = {}
        default = build().coerce(llm, f=b"".join)
        if SEEDED:
            contexts = [tokenize(llm, text)[:k] for k in range(1, len(tokenize(llm, text)) + 1)]
            engine = build().coerce(llm, f=b"".join, engine=True)
            row["default_class"] = type(default).__name__
            row["default_ms"] = await step_ms(default, contexts, repeats)
            row["engine_ms"] = await step_ms(engine, contexts, repeats)
            if isinstance(build(), BoolCFG):  # the engine on the text as written (its own lexer)
                from genlm.control import GuidedConstraint

                written = GuidedConstraint.from_lark(llm, build().lark_grammar)
                row["written_ms"] = await step_ms(written, contexts, repeats)
        row["smc_s"] = await smc_s(llm, default, repeats)
        out[name] = row
        print(name, row, flush=True)
    return out


def table(ours: dict, ref: dict | None) -> str:
    """The markdown table of `measure`'s results (ref: 0.4.1's, for the last columns)."""
    lines = [
        "| workload | default coercion | default ms/step | engine=True ms/step | "
        "engine on the text as written | default / engine | "
        "SMC s/run | 0.4.1 SMC s/run | speed-up vs 0.4.1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in ours.items():
        old = (ref or {}).get(name, {}).get("smc_s")
        engine = r.get("written_ms", r["engine_ms"])
        written = f"{r['written_ms']:.3f}" if "written_ms" in r else "—"
        lines.append(
            f"| {name} | {r['default_class']} | {r['default_ms']:.3f} | {r['engine_ms']:.3f} | "
            f"{written} | {r['default_ms'] / engine:.2f}× | {r['smc_s']:.3f} | "
            + (f"{old:.3f} | **{old / r['smc_s']:.1f}×** |" if old else "— | — |")
        )
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF directory (default: the embedded model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref", default=None, help="this script's --out JSON from genlm-control 0.4.1")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    only = set(filter(None, args.only.split(","))) or None
    result = {"version": VERSION, "rows": await measure(args.model, args.repeats, only)}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    if SEEDED:
        ref = json.loads(Path(args.ref).read_text())["rows"] if args.ref else None
        print(table(result["rows"], ref))


if __name__ == "__main__":
    asyncio.run(main())
