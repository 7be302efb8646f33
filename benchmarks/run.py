"""SMC against the forward-pass floor: wall time, tokens/s and ratio for each workload.

    python benchmarks/run.py                     # every workload, 5 repeats
    python benchmarks/run.py --repeats 9 --only unconstrained,regex
    python benchmarks/run.py --only structured --structured-ref 041.json   # see structured.py
    python benchmarks/run.py --backend vllm      # ms per step on vLLM beside HF (vllm_steps.py)
    python benchmarks/real_tokenizers.py --backends hf,vllm   # 32k and 131k real vocabularies, both floors

Prints a markdown table and writes the raw timings to
benchmarks/results/latest.json. Each workload and its floor (plain batched
ancestral sampling with a KV cache, same model, batch size and tokens; see
`floor.py`) are timed back to back in the same process, repeat after repeat, so
a machine shared with other jobs slows both alike; the ratio reported is the
median over repeats of `workload time / floor time`. The floor draws by inverse
CDF (the cheapest exact draw); the same loop drawing with `torch.multinomial`, as
`transformers`' `generate` does, is timed too and reported as a second ratio.
Every run is warmed up once first. The LM's caches are cleared before every
timed run; constraint potentials keep the state caches they built (as in a long
session).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import Workload, embedded_workloads, synthetic_workloads  # noqa: E402

ALL = ("unconstrained", "regex", "json", "sql", "gathered", "synthetic", "structured")
# issue 36's targets, each a ratio to the row's own same-process floor (the gathered
# runs' floor draws 64 rows)
TARGETS = {
    "unconstrained (direct, N=16)": 1.3,
    "4 runs gathered (direct, N=16 each)": 1.3,
    "regex (AWRS, N=10)": 1.6,
    "JSON schema (AWRS, N=10)": 1.6,
    "SQL Lark grammar (AWRS, N=10)": 1.6,
}


def timed(call, *args) -> tuple[float, int]:
    t0 = time.perf_counter()
    tokens = call(*args)
    return time.perf_counter() - t0, tokens


async def measure(w: Workload, repeats: int) -> dict:
    """Warm up, then alternate floor and workload `repeats` times."""
    w.reset()
    w.floor(0)
    w.floor(0, "multinomial")
    await w.run(0)
    floor_s, run_s, tokens, floor_tokens, mult_s = [], [], [], [], []
    for r in range(repeats):
        w.reset()
        t, n = timed(w.floor, r + 1)
        floor_s.append(t)
        floor_tokens.append(n)
        mult_s.append(timed(w.floor, r + 1, "multinomial")[0])
        w.reset()
        t0 = time.perf_counter()
        n = await w.run(r + 1)
        run_s.append(time.perf_counter() - t0)
        tokens.append(n)
    ratios = [a / b for a, b in zip(run_s, floor_s)]
    return {
        "multinomial_floor_s": mult_s,
        "multinomial_floor_median_s": statistics.median(mult_s),
        "ratio_to_multinomial_floor": statistics.median(a / b for a, b in zip(run_s, mult_s)),
        "name": w.name,
        "n": w.n,
        "steps": w.steps,
        "floor_s": floor_s,
        "run_s": run_s,
        "tokens": tokens,
        "floor_tokens": floor_tokens,
        "floor_median_s": statistics.median(floor_s),
        "run_median_s": statistics.median(run_s),
        "ratio": statistics.median(ratios),
        "per_step": w.per_step,
        "target": TARGETS.get(w.name),
    }


def row_text(r: dict) -> str:
    floor_tps = statistics.median(n / t for n, t in zip(r["floor_tokens"], r["floor_s"]))
    run_tps = statistics.median(n / t for n, t in zip(r["tokens"], r["run_s"]))
    step = f" ({1e3 * r['run_median_s'] / r['steps']:.2f} ms/step)" if r["per_step"] else ""
    target = "" if r.get("target") is None else f"≤ {r['target']:g}×"
    return (
        f"| {r['name']} | {1e3 * r['floor_median_s']:.1f} | {floor_tps:,.0f} | "
        f"{1e3 * r['run_median_s']:.1f}{step} | {run_tps:,.0f} | **{r['ratio']:.2f}×** | {target} | "
        f"{1e3 * r['multinomial_floor_median_s']:.1f} | {r['ratio_to_multinomial_floor']:.2f}× |"
    )


def table(rows: list[dict], gathered: tuple[float, float] | None) -> str:
    lines = [
        "| workload | floor ms | floor tok/s | SMC ms | SMC tok/s | ratio to floor | target "
        "| multinomial floor ms | ratio to it |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    lines += [row_text(r) for r in rows]
    if gathered is not None:
        lines.append("")
        lines.append(
            f"4 gathered runs / 1 run (wall time): **{gathered[0]:.2f}×**; "
            f"the floor itself: 64 rows / 16 rows = {gathered[1]:.2f}×"
        )
    return "\n".join(lines)


def gathered_ratio(rows: list[dict]) -> tuple[float, float] | None:
    """Medians over repeats of (4 gathered runs / 1 run) and of (floor of 64 / floor of 16)."""
    one = next((r for r in rows if r["name"].startswith("1 run")), None)
    four = next((r for r in rows if r["name"].startswith("4 runs")), None)
    if one is None or four is None:
        return None
    runs = statistics.median(a / b for a, b in zip(four["run_s"], one["run_s"]))
    floors = statistics.median(a / b for a, b in zip(four["floor_s"], one["floor_s"]))
    return runs, floors


# Structured workloads -----------------------------------------------------------
# Per-step cost of the default coercion against the engine, and AWRS SMC per run, for
# regex, JSON, SQL-like Lark and SMILES (`structured.py`, which also runs under 0.4.1:
# pass its --out JSON from there as --structured-ref for the speed-up column).


async def structured_section(repeats: int, ref_path: str | None) -> dict:
    """Print the structured table; return the rows (for the results JSON)."""
    import structured

    rows = await structured.measure(None, repeats)
    ref = json.loads(Path(ref_path).read_text())["rows"] if ref_path else None
    print(structured.table(rows, ref))
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}")
    ap.add_argument("--sizes", default="4096,32768,131072", help="synthetic vocabulary sizes")
    ap.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the objects loaded before timing to the cyclic collector (see docs/performance.md)",
    )
    ap.add_argument("--structured-ref", default=None, help="structured.py --out JSON from 0.4.1")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "latest.json"))
    ap.add_argument("--backend", choices=("hf", "vllm"), default="hf", help="vllm: the step table of vllm_steps.py")
    args = ap.parse_args()
    if args.backend == "vllm":
        import vllm_steps

        print(vllm_steps.table(await vllm_steps.run(args.repeats)))
        return
    names = set(args.only.split(","))
    unknown = names - set(ALL)
    if unknown:
        ap.error(f"unknown workloads {sorted(unknown)}; choose from {list(ALL)}")
    torch.set_num_threads(args.threads)
    workloads = embedded_workloads(names)
    if "synthetic" in names:
        workloads += synthetic_workloads([int(s) for s in args.sizes.split(",")])
    if not args.no_gc_freeze:
        # A full collection walks every object of torch, transformers and the loaded
        # models (about 0.25 s here) and would land in a random repeat.
        gc.collect()
        gc.freeze()
    structured_rows = (
        await structured_section(args.repeats, args.structured_ref) if "structured" in names else None
    )
    rows = []
    for w in workloads:
        rows.append(await measure(w, args.repeats))
        print(row_text(rows[-1]), file=sys.stderr, flush=True)
    gathered = gathered_ratio(rows)
    if rows:  # `--only structured` alone has no floor rows
        print(table(rows, gathered))
    meta = {
        "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]]),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "repeats": args.repeats,
        "gc_freeze": not args.no_gc_freeze,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {"meta": meta, "rows": rows, "gathered_over_one": gathered, "structured": structured_rows}
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
