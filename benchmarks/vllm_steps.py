"""SMC step time on the vLLM backend beside the HF backend, on the same model.

    python benchmarks/run.py --backend vllm [--repeats 3]
    python benchmarks/vllm_steps.py [--repeats 3] [--tokens 32]

For unconstrained SMC (`direct_token_sampler`, N=16) and regex AWRS (N=10) on the
embedded model, each backend's milliseconds per step (`wall / steps`, the steps
being those the run took, `_steps.py`; caches cleared before every run, one warm-up
run first; median over repeats) and, on vLLM, the share of a step spent outside
vLLM's own calls (`add_request` and `step`, timed by the backend as
`engine_seconds`): the library's share, targeted at ≤ 20%. Also used by
`gpu_check.py` on CUDA.
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

REGEX = r"[A-Z][a-z ,]{0,80}\.( [A-Z][a-z ,]{0,80}\.){0,5}"
WORKLOADS = (("unconstrained (direct, N=16)", "The function", 16), ("regex (AWRS, N=10)", "Summary:", 10))
OUTSIDE_TARGET = 0.20


def engine_opts() -> dict:
    """Small engine settings: float32 on the CPU (eager, 32-token blocks), a share of the GPU on CUDA."""
    import torch

    if torch.cuda.is_available():
        return {"max_model_len": 256, "gpu_memory_utilization": 0.3}
    return {"dtype": "float32", "enforce_eager": True, "max_model_len": 256, "block_size": 32}


def _sampler(llm, label: str):
    from genlm.control import AWRS, BoolFSA, direct_token_sampler

    if label.startswith("unconstrained"):
        return direct_token_sampler(llm)
    return AWRS(llm, BoolFSA.from_regex(REGEX).coerce(llm, f=b"".join))


async def _timed_run(llm, sampler, n: int, tokens: int, seed: int) -> tuple[float, float, int]:
    """(wall seconds, seconds inside vLLM or 0, steps) of one SMC run."""
    import torch

    llm.model.clear_cache()
    inside = getattr(llm.model, "engine_seconds", 0.0)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    with counted_steps() as steps:
        t0 = time.perf_counter()
        await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=seed)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    inside = getattr(llm.model, "engine_seconds", 0.0) - inside
    return wall, inside, steps.most


async def measure(backends: dict, repeats: int, tokens: int) -> list[dict]:
    """One row per (workload, backend)."""
    rows = []
    for label, prompt, n in WORKLOADS:
        for name, base in backends.items():
            llm = base.spawn()
            llm.set_prompt_from_str(prompt)
            sampler = _sampler(llm, label)
            await _timed_run(llm, sampler, n, tokens, seed=0)  # warm-up
            per_step, outside = [], []
            for r in range(repeats):
                wall, inside, steps = await _timed_run(llm, sampler, n, tokens, seed=r + 1)
                per_step.append(1000 * wall / steps)
                outside.append(1 - inside / wall if name == "vllm" else None)
            row = {"workload": label, "backend": name, "n": n, "tokens": tokens,
                   "ms_per_step": statistics.median(per_step)}
            if name == "vllm":
                row["outside_share"] = statistics.median(outside)
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    return rows


def load_backends() -> dict:
    """The embedded model on HF (on CUDA where there is one) and on vLLM."""
    import torch

    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    hf = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    if torch.cuda.is_available():
        hf.model.model.to("cuda")
    return {"hf": hf, "vllm": PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", **engine_opts())}


def table(rows: list[dict]) -> str:
    lines = [
        "| workload | backend | N | tokens | ms/step | vLLM / HF | outside vLLM's calls |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    hf = {r["workload"]: r["ms_per_step"] for r in rows if r["backend"] == "hf"}
    for r in rows:
        ratio = f"{r['ms_per_step'] / hf[r['workload']]:.2f}×" if r["backend"] == "vllm" and r["workload"] in hf else ""
        share = f"{100 * r['outside_share']:.0f}% (target ≤ {100 * OUTSIDE_TARGET:.0f}%)" if "outside_share" in r else ""
        lines.append(f"| {r['workload']} | {r['backend']} | {r['n']} | {r['tokens']} | {r['ms_per_step']:.2f} | {ratio} | {share} |")
    return "\n".join(lines)


async def run(repeats: int = 3, tokens: int = 32) -> list[dict]:
    backends = load_backends()
    try:
        return await measure(backends, repeats, tokens)
    finally:
        backends["vllm"].model.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args(argv)
    print(table(asyncio.run(run(args.repeats, args.tokens))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
