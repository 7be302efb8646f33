"""SMC on real vocabularies against the raw-decode floor on the same model, on HF and vLLM.

    python benchmarks/real_tokenizers.py                   # both models, HF, 3 repeats
    python benchmarks/real_tokenizers.py --kinds tekken --backends hf,vllm --repeats 5
    python benchmarks/real_tokenizers.py --only unconstrained

The models are the test suite's (`tests/toys/real_tokenizers.py`): Llama-shaped, random
weights, hidden size 32, over Mistral 7B's SentencePiece vocabulary (32,000 tokens) and
Mistral NeMo's tekken byte-level BPE (131,072 tokens). So the forward is small and the
per-step cost over the vocabulary (rows, EOS, masks, draws) is what the ratios show.

For unconstrained SMC (`direct_token_sampler`, N=16) and regex AWRS (N=10), each
backend's milliseconds per step (wall / the steps the run took, `_steps.py`; caches cleared
before every run, one warm-up run first; median over repeats), beside two floors on the
same model, batch and number of tokens, timed back to back with the runs:

- `HF floor`: `floor.lm_floor`, batched ancestral sampling with transformers' KV cache
  and an inverse-CDF draw (what `run.py` calls the floor);
- `vLLM floor` (with `--backends` naming vllm): the same decode done by vLLM's engine
  itself, N requests of that many tokens (temperature 1, EOS ignored) stepped together.

A ratio is the median over repeats of (run / floor) for the floor timed just before
the run, so a machine whose load changes slows both alike.

`vllm` needs the vllm package (CI's second environment, `requirements-vllm-cpu.txt`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the table's

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _steps import counted_steps  # noqa: E402
from floor import lm_floor  # noqa: E402
from toys.real_tokenizers import KINDS, model_dir  # noqa: E402
from vllm_steps import engine_opts  # noqa: E402

STEPS = 32
PATTERN = r" [a-z]+( [a-z]+)*\."
PROMPT = "The function"
WORKLOADS = {"unconstrained": ("unconstrained (direct, N=16)", 16), "regex": ("regex (AWRS, N=10)", 10)}
_floor_ids = itertools.count()


def vllm_floor(engine, prompt_ids: list[int], n: int, steps: int, seed: int) -> int:
    """`n` sequences of `steps` tokens after `prompt_ids`, sampled by vLLM's engine."""
    from vllm import SamplingParams

    for i in range(n):
        params = SamplingParams(max_tokens=steps, temperature=1.0, ignore_eos=True, seed=seed * n + i, detokenize=False)
        engine.add_request(f"floor-{next(_floor_ids)}", {"prompt_token_ids": list(prompt_ids)}, params)
    while engine.has_unfinished_requests():
        engine.step()
    return n * steps


def sampler_for(llm, name: str):
    from genlm.control import AWRS, BoolFSA, direct_token_sampler

    if name == "unconstrained":
        return direct_token_sampler(llm)
    return AWRS(llm, BoolFSA.from_regex(PATTERN).coerce(llm, f=b"".join))


def load(kind: str, backends: list[str]) -> dict:
    from genlm.control import PromptedLLM

    out = {}
    for backend in backends:
        t0 = time.perf_counter()
        opts = engine_opts() if backend == "vllm" else {}
        out[backend] = PromptedLLM.from_name(str(model_dir(kind)), backend=backend, **opts, **({"rows": os.environ["ROWS"]} if os.environ.get("ROWS") else {}))
        print(f"{kind} on {backend}: |V| = {len(out[backend].vocab_eos)}, loaded in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr, flush=True)
    return out


async def smc_seconds(llm, sampler, n: int, seed: int) -> tuple[float, int]:
    """(wall seconds, steps) of one run, caches cleared first."""
    llm.model.clear_cache()
    with counted_steps() as steps:
        t0 = time.perf_counter()
        await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=STEPS, seed=seed)
        wall = time.perf_counter() - t0
    return wall, steps.most


def floors_for(models: dict, prompt: list[int], n: int) -> dict:
    """`floor(seed)` per loaded backend: the raw decode of `n` sequences of `STEPS` tokens."""
    floors = {}
    if "hf" in models:
        hf_model = models["hf"].model.model
        floors["hf"] = lambda seed: lm_floor(hf_model, prompt, n, STEPS, seed)
    if "vllm" in models:
        engine = models["vllm"].model.engine
        floors["vllm"] = lambda seed: vllm_floor(engine, prompt, n, STEPS, seed)
    return floors


async def measure(kind: str, models: dict, names: list[str], repeats: int) -> list[dict]:
    rows = []
    for name in names:
        label, n = WORKLOADS[name]
        for backend, base in models.items():
            llm = base.spawn()
            llm.set_prompt_from_str(PROMPT)
            prompt = list(llm.prompt_ids)
            floors = floors_for(models, prompt, n)
            sampler = sampler_for(llm, name)
            await smc_seconds(llm, sampler, n, 0)  # warm-up
            for f in floors.values():
                f(0)
            per_step, floor_ms = [], {k: [] for k in floors}
            for r in range(repeats):
                for k, f in floors.items():
                    t0 = time.perf_counter()
                    f(r + 1)
                    floor_ms[k].append(1e3 * (time.perf_counter() - t0) / STEPS)
                wall, steps = await smc_seconds(llm, sampler, n, r + 1)
                per_step.append(1e3 * wall / steps)
            row = {"kind": kind, "vocab": len(llm.vocab_eos), "workload": label, "backend": backend, "n": n,
                   "ms_per_step": statistics.median(per_step)}
            for k, v in floor_ms.items():
                row[f"{k}_floor_ms_per_step"] = statistics.median(v)
                row[f"{k}_floor_ratio"] = statistics.median(a / b for a, b in zip(per_step, v))
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model (tokens) | workload | backend | ms/step | HF floor ms/step | ÷ HF floor "
             "| vLLM floor ms/step | ÷ vLLM floor |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        cells = [f"{r['kind']} ({r['vocab']:,})", r["workload"], r["backend"], f"{r['ms_per_step']:.2f}"]
        for k in ("hf", "vllm"):
            f = r.get(f"{k}_floor_ms_per_step")
            cells += ["", ""] if f is None else [f"{f:.2f}", f"**{r[f'{k}_floor_ratio']:.2f}×**"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--backends", default="hf", help="comma-separated: hf, vllm")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="unconstrained,regex", help="workloads: unconstrained, regex")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as vLLM's CPU engine sets)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    for kind in args.kinds.split(","):
        models = load(kind, args.backends.split(","))
        try:
            rows += await measure(kind, models, args.only.split(","), args.repeats)
        finally:
            if "vllm" in models:
                models["vllm"].model.close()
    print(table(rows))


if __name__ == "__main__":
    asyncio.run(main())
