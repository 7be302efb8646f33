"""SMC on the vLLM backend beside vLLM's own decode of the same rows, on one engine.

    python benchmarks/vllm_decode.py [--repeats 3] [--tokens 32 160] [--per-query]

In one process, on one engine (the embedded model), interleaved per repeat:

- vLLM's own decode: N requests of the prompt (temperature 1, `ignore_eos`,
  `max_tokens=T`) added to the engine and stepped until all have finished, on the
  backend's engine thread between its jobs; ms per step = wall / T;
- the project's SMC on the vLLM backend (particles decoding in place): unconstrained
  `direct_token_sampler` N=16, regex AWRS N=16, and 4 gathered unconstrained runs × 16
  particles (beside vLLM's decode of 64 rows); ms per step = wall / steps, the steps
  being those the runs took (`_steps`); kept rows cleared before every run.

Reported per workload and T: the medians, `ratio = SMC / vLLM decode` (target ≤ 1.2)
and, per workload, the ms per step at the largest T over that at the smallest
(target ≤ 1.2). `--per-query` adds the same SMC with in-place decoding off (one
request per query, the backend before in-place decoding) for comparison. One warm-up
of each first. Used by `gpu_check.py` on CUDA.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

from _steps import counted_steps

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the table's

PROMPT = "The function"
REGEX = r"[A-Z][a-z ,]+(\. [A-Z][a-z ,]+)*"
#: (label, sampler kind, runs gathered, particles per run)
WORKLOADS = (
    ("unconstrained (direct, N=16)", "direct", 1, 16),
    ("regex (AWRS, N=16)", "awrs", 1, 16),
    ("4 gathered runs × 16 (direct)", "direct", 4, 16),
)
RATIO_TARGET = 1.2


def engine_opts(tokens: int) -> dict:
    """Float32 eager on the CPU; CUDA graphs on (vLLM's default) with a share of the GPU."""
    import torch

    length = max(256, 2 ** (tokens + 16).bit_length())
    if torch.cuda.is_available():
        return {"max_model_len": length, "gpu_memory_utilization": 0.3}
    return {"dtype": "float32", "enforce_eager": True, "max_model_len": length, "block_size": 32}


def vllm_decode(model, prompt_ids: list[int], n: int, tokens: int) -> tuple[float, int]:
    """(wall seconds, steps) of vLLM decoding `n` rows of `prompt_ids` for `tokens`
    tokens, run on the backend's engine thread (no live request of ours is held)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from genlm.control.lm._vllm import _token_input

    engine = model.engine
    params = SamplingParams(
        temperature=1.0,
        max_tokens=tokens,
        ignore_eos=True,
        detokenize=False,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )

    def decode() -> tuple[float, int]:
        engine.reset_prefix_cache()
        start, steps = time.perf_counter(), 0
        for i in range(n):
            engine.add_request(f"floor-{time.monotonic_ns()}-{i}", _token_input(prompt_ids), params)
        while engine.has_unfinished_requests():
            engine.step()
            steps += 1
        _sync()
        return time.perf_counter() - start, steps

    return model._call(decode)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _sampler(llm, kind: str):
    from genlm.control import AWRS, BoolFSA, direct_token_sampler

    if kind == "direct":
        return direct_token_sampler(llm)
    return AWRS(llm, BoolFSA.from_regex(REGEX).coerce(llm, f=b"".join))


async def smc(llm, sampler, runs: int, n: int, tokens: int, seed: int) -> tuple[float, int]:
    """(wall seconds, steps) of `runs` gathered SMC runs of `n` particles (the steps
    they ran, see `_steps`)."""
    llm.model.clear_cache()
    _sync()
    with counted_steps() as steps:
        start = time.perf_counter()
        await asyncio.gather(
            *(
                sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=seed + k)
                for k in range(runs)
            )
        )
        _sync()
        wall = time.perf_counter() - start
    return wall, steps.most


async def measure(llm, repeats: int, token_counts: list[int], per_query: bool) -> list[dict]:
    model = llm.model
    rows = []
    for label, kind, runs, n in WORKLOADS:
        sampler = _sampler(llm, kind)
        for tokens in token_counts:
            ways = {"in place": True, "per query": False} if per_query else {"in place": True}
            times: dict[str, list[float]] = {"vllm": [], **{w: [] for w in ways}}
            for r in range(repeats + 1):  # the first round warms up
                wall, steps = vllm_decode(model, llm.prompt_ids, runs * n, tokens)
                if r:
                    times["vllm"].append(1000 * wall / steps)
                for way, on in ways.items():
                    model.release()
                    model._driver.in_place = on
                    try:
                        wall, steps = await smc(llm, sampler, runs, n, tokens, seed=r)
                    finally:
                        model._driver.in_place = True
                    if r:
                        times[way].append(1000 * wall / steps)
            row = {"workload": label, "rows": runs * n, "tokens": tokens}
            row.update({k: statistics.median(v) for k, v in times.items()})
            row["ratio"] = row["in place"] / row["vllm"]
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    per_query = any("per query" in r for r in rows)
    head = "| workload | rows | tokens | vLLM decode ms/step | SMC ms/step | ratio (≤ 1.2) |"
    head += " per-query SMC ms/step |" if per_query else ""
    lines = [head, "|---|---:|---:|---:|---:|---:|" + ("---:|" if per_query else "")]
    for r in rows:
        line = f"| {r['workload']} | {r['rows']} | {r['tokens']} | {r['vllm']:.2f} | {r['in place']:.2f} | {r['ratio']:.2f}× |"
        lines.append(line + (f" {r['per query']:.2f} |" if per_query else ""))
    lines.append("")
    for label in dict.fromkeys(r["workload"] for r in rows):
        mine = sorted((r for r in rows if r["workload"] == label), key=lambda r: r["tokens"])
        if len(mine) > 1:
            lo, hi = mine[0], mine[-1]
            lines.append(
                f"- {label}: SMC ms/step at {hi['tokens']} over {lo['tokens']} tokens "
                f"{hi['in place'] / lo['in place']:.2f}× (target ≤ 1.2); vLLM's {hi['vllm'] / lo['vllm']:.2f}×"
            )
    return "\n".join(lines)


def load(tokens: int):
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", **engine_opts(tokens))
    llm.set_prompt_from_str(PROMPT)
    return llm


async def run(
    repeats: int = 3, token_counts: tuple[int, ...] = (32, 160), per_query: bool = False
) -> list[dict]:
    llm = load(max(token_counts))
    try:
        return await measure(llm, repeats, list(token_counts), per_query)
    finally:
        llm.model.close()


async def run_with_runner(
    repeats: int = 3, token_counts: tuple[int, ...] = (32, 160)
) -> tuple[list[dict], str]:
    """`run`, and the model runner the engine used ("v1" or "v2")."""
    llm = load(max(token_counts))
    try:
        return await measure(llm, repeats, list(token_counts), False), llm.model.runner
    finally:
        llm.model.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, nargs="+", default=[32, 160])
    ap.add_argument(
        "--per-query", action="store_true", help="also time SMC with one request per query"
    )
    args = ap.parse_args(argv)
    start = os.getloadavg()
    rows = asyncio.run(run(args.repeats, tuple(args.tokens), args.per_query))
    print(f"load average (1, 5, 15 min) before: {start}, after: {os.getloadavg()}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
