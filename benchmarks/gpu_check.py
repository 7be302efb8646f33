"""The one-command GPU check: gpu-marked tests, SMC against the batched-decode floor on
the device, and host syncs per SMC step.

    python benchmarks/gpu_check.py --out DIR              # on a CUDA machine, <= 8 minutes
    python benchmarks/gpu_check.py --out DIR --cpu-smoke  # reduced run (automatic without CUDA)

Writes `DIR/gpu_check.md` (markdown tables) and `DIR/gpu_check.json` (the same numbers
and the environment). On CUDA:

(a) `pytest -m gpu -q` in a subprocess with a timeout: pass/fail/skip counts and the
    output's tail;
(b) for the embedded model and a randomly initialised Llama-shaped model of about 1B
    parameters with a 128k vocabulary (bf16, built on the device; synthetic byte-level
    tokenizer, see `_gpu_check_models.py`): unconstrained SMC (`direct_token_sampler`)
    and regex AWRS SMC at N = 16 and 64 for 64 tokens, and AWRS's search path (the
    regex checked in blocks, the race drawn on the device) at N = 16, each against the floor (plain
    batched decoding with a KV cache on the same device, same N and tokens). Reported:
    ms per step (`wall / steps`, the steps being those the run took, see `_steps.py`) and
    `ratio = SMC ms per step / floor ms per step`, the median over `--repeats` after
    one warm-up run of each;
(c) passes over the vocabulary per particle and step (`_row_passes.RowPasses`: the O(V)
    kernels the device runs) of one more SMC run and of the floor, and their ratio;
(c') host syncs per SMC step: one extra SMC run under
    `torch.cuda.set_sync_debug_mode("warn")`, its synchronising-operation warnings
    counted and divided by its steps;
(d) where the vllm package is importable, the vLLM backend beside HF on the embedded
    model (`vllm_steps.py`: ms per step, and the share outside vLLM's own calls);
    recorded as skipped elsewhere and in the CPU smoke mode;
(e) there too, SMC on the vLLM backend beside vLLM's own decode of the same rows on
    one engine (`vllm_decode.py`: direct and regex AWRS at N=16, 4 gathered runs × 16
    against 64 rows, at 32 and 160 tokens; CUDA graphs on; the model runner used).

No measurement starts after `--budget` seconds (default 360, so that a run stays
within 8 minutes); the rows left are recorded as skipped. The CPU smoke mode uses the embedded model and a tiny Llama-shaped model, N = 4, 8
tokens, one repeat; (a) is recorded as skipped and (c) as not applicable. A part that
fails (an out-of-memory N = 64, say) is recorded with its error and the run goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _gpu_check_models import (  # noqa: E402
    LLAMA_1B,
    LLAMA_TINY,
    device_floor,
    prompted_over,
    random_llama,
    synchronize,
)
from _gpu_check_report import write_report  # noqa: E402
from _steps import counted_steps  # noqa: E402

REGEX = r"[a-z ,.]+"  # lowercase words: most tokens of both vocabularies are allowed
PROMPT = "The value of x is"
TARGETS = {"unconstrained": 1.2, "regex AWRS": 1.5}
# AWRS's search path (the regex as a condition without rows, checked in blocks), with
# its race drawn on the rows' device; no target, measured at the smallest N only
SEARCH = "regex AWRS search"


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a positive finite {kind.__name__}, got {text!r}")
        return value

    return parse


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu_check.md and gpu_check.json")
    parser.add_argument("--cpu-smoke", action="store_true", help="the reduced CPU run (default without CUDA)")
    parser.add_argument("--repeats", type=_positive(int), default=None, help="timed runs per workload (default 3; 1 in smoke mode)")
    parser.add_argument("--budget", type=_positive(float), default=360.0,
                        help="seconds after which no new measurement starts (default 360)")
    parser.add_argument("--test-timeout", type=_positive(float), default=180.0, help="seconds for `pytest -m gpu`")
    return parser.parse_args(argv)


def environment(device: str) -> dict:
    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "device_name": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }
    if device == "cuda":
        env["device_name"] = torch.cuda.get_device_name(0)
    return env


def run_gpu_tests(timeout: float) -> dict:
    """`pytest -m gpu -q` in a subprocess: counts by outcome and the output's tail."""
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-n", "0", "-p", "no:cacheprovider"]
    try:
        proc = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return {"status": f"timeout after {timeout:.0f} s", "tail": out[-3000:]}
    text = proc.stdout + proc.stderr
    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors", "deselected")}
    summary = text.strip().splitlines()[-1] if text.strip() else ""
    for num, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary):
        counts["errors" if what.startswith("error") else what] += int(num)
    status = {0: "passed", 5: "no tests collected"}.get(proc.returncode, f"exit code {proc.returncode}")
    return {"status": status, **counts, "tail": text[-3000:]}


def models(device: str, smoke: bool) -> list[tuple[str, Callable]]:
    """(label, build) for the embedded model and the Llama-shaped one; `build()` returns
    (label, PromptedLLM, HF model on `device`)."""
    from _gpu_check_models import byte_level_tokenizer

    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    def embedded():
        base = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
        hf = base.model.model.to(device)
        return "embedded", prompted_over(hf, base.model.tokenizer), hf

    def llama():
        shape = LLAMA_TINY if smoke else LLAMA_1B
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        hf = random_llama(shape, device, dtype)
        params = sum(p.numel() for p in hf.parameters())
        label = f"random Llama {params / 1e6:,.0f}M, V={shape.vocab}, {str(dtype).removeprefix('torch.')}"
        return label, prompted_over(hf, byte_level_tokenizer(shape.vocab)), hf

    return [("embedded", embedded), ("random Llama", llama)]


def sampler_for(llm, workload: str):
    from genlm.control import AWRS, BoolFSA, direct_token_sampler

    if workload == "unconstrained":
        return direct_token_sampler(llm)
    if workload != SEARCH:
        return AWRS(llm, BoolFSA.from_regex(REGEX).coerce(llm, f=b"".join))
    sampler = AWRS(llm, BoolFSA.from_regex(REGEX).coerce(llm, f=b"".join, engine=False))
    # the condition's rows are left unread: the search path, checking drawn tokens
    # in blocks, with its race on the device (the default off the CPU; forced so
    # that the CPU smoke run takes it too)
    sampler.exact, sampler.device_race = False, True
    return sampler


async def smc_seconds(llm, sampler, n: int, tokens: int, seed: int) -> tuple[float, int]:
    """Seconds of one SMC run (caches cleared first, synchronised after) and its steps."""
    llm.model.clear_cache()
    device = llm.model.device
    synchronize(device)
    with counted_steps() as steps:
        t0 = time.perf_counter()
        await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=seed)
        synchronize(device)
        seconds = time.perf_counter() - t0
    return seconds, steps.most


async def count_syncs(llm, sampler, n: int, tokens: int) -> float | None:
    """Host syncs per SMC step, from `torch.cuda.set_sync_debug_mode("warn")` (None off CUDA)."""
    if llm.model.device.type != "cuda":
        return None
    llm.model.clear_cache()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with counted_steps() as steps:
                await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=99)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = sum("synchroniz" in str(w.message).lower() for w in seen)
    return syncs / steps.most


async def count_readbacks(llm, sampler, n: int, tokens: int) -> float:
    """Read-backs of tensor rows per SMC step, counted by the library
    (`genlm.control.draw.counting_readbacks`); 0 where rows are NumPy (a CPU model)."""
    from genlm.control.draw import counting_readbacks

    llm.model.clear_cache()
    with counting_readbacks() as got, counted_steps() as steps:
        await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=98)
    return got.value / steps.most


async def count_passes(llm, hf, sampler, n: int, tokens: int) -> dict:
    """O(V) kernels per particle and step (`_row_passes.RowPasses`, on the device's
    kernels) of one SMC run and of the floor, and their ratio."""
    from _row_passes import RowPasses, StepCount

    v = len(llm.vocab_eos)
    llm.model.clear_cache()
    with StepCount(sampler) as steps, RowPasses(v) as count:
        await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=97)
    with RowPasses(v) as floor:
        device_floor(hf, list(llm._start), n, tokens, seed=97)
    smc, base = count.summary(steps.particle_steps), floor.summary(n * tokens)
    return {
        "passes_per_step": smc["passes"],
        "floor_passes_per_step": base["passes"],
        "pass_ratio": smc["passes"] / base["passes"] if base["passes"] else None,
        "row_mb_per_step": smc["bytes"] / 1e6,
        "floor_row_mb_per_step": base["bytes"] / 1e6,
        "passes_by_op": smc["top"],
    }


async def measure(label: str, llm, hf, workload: str, n: int, tokens: int, repeats: int) -> dict:
    """One table row: SMC and floor ms per step, their ratio, syncs per step."""
    row = {"model": label, "workload": workload, "n": n, "tokens": tokens, "target": TARGETS.get(workload)}
    try:
        sampler = sampler_for(llm, workload)
        prompt = list(llm._start)
        await smc_seconds(llm, sampler, n, tokens, seed=0)  # warm-up
        device_floor(hf, prompt, n, tokens, seed=0)
        smc_ms, floor_ms, ratios = [], [], []
        for r in range(repeats):
            seconds, steps = await smc_seconds(llm, sampler, n, tokens, seed=r + 1)
            floor = device_floor(hf, prompt, n, tokens, seed=r + 1)
            smc_ms.append(1000 * seconds / steps)
            floor_ms.append(1000 * floor / tokens)
            ratios.append(smc_ms[-1] / floor_ms[-1])
        row.update(
            smc_ms_per_step=statistics.median(smc_ms),
            floor_ms_per_step=statistics.median(floor_ms),
            ratio=statistics.median(ratios),
            syncs_per_step=await count_syncs(llm, sampler, n, tokens),
            readbacks_per_step=await count_readbacks(llm, sampler, n, tokens),
            status="ok",
        )
        row.update(await count_passes(llm, hf, sampler, n, tokens))
    except Exception as exc:  # recorded, and the run goes on (an OOM at N = 64, say)
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500])
        traceback.print_exc()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    print(row, flush=True)
    return row


async def benchmark(device: str, smoke: bool, repeats: int, deadline: float) -> list[dict]:
    """Every row; once `time.perf_counter()` passes `deadline` the rest are recorded as skipped."""
    ns, tokens = ((4,), 8) if smoke else ((16, 64), 64)
    rows: list[dict] = []
    for name, build in models(device, smoke):
        try:
            label, llm, hf = build()
            llm.prompt_ids = llm.model.tokenizer.encode(PROMPT, add_special_tokens=False)
        except Exception as exc:  # recorded; the other model still runs
            traceback.print_exc()
            rows.append({"model": name, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        runs = [(n, workload) for n in ns for workload in TARGETS] + [(ns[0], SEARCH)]
        for n, workload in runs:
            if time.perf_counter() > deadline:
                rows.append({"model": label, "workload": workload, "n": n, "tokens": tokens,
                             "target": TARGETS.get(workload), "status": "skipped: over the time budget"})
                continue
            rows.append(await measure(label, llm, hf, workload, n, tokens, repeats))
        del llm, hf
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def vllm_section(smoke: bool, repeats: int, deadline: float) -> dict:
    """The vLLM backend beside HF on the embedded model (`vllm_steps.py`), on CUDA
    where the vllm package is importable; a skipped status elsewhere."""
    import importlib.util

    if smoke or not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
        return {"status": "skipped (needs CUDA and the vllm package)"}
    if time.perf_counter() > deadline:
        return {"status": "skipped: over the time budget"}
    try:
        from vllm_steps import run

        return {"status": "ok", "rows": asyncio.run(run(repeats))}
    except Exception as exc:  # recorded; the report is still written
        traceback.print_exc()
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}


def vllm_decode_section(smoke: bool, repeats: int, deadline: float) -> dict:
    """SMC on the vLLM backend beside vLLM's own decode of the same rows, on one
    engine (`vllm_decode.py`, CUDA graphs on), on CUDA where vllm is importable."""
    import importlib.util

    if smoke or not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
        return {"status": "skipped (needs CUDA and the vllm package)"}
    if time.perf_counter() > deadline:
        return {"status": "skipped: over the time budget"}
    try:
        import vllm_decode

        rows, runner = asyncio.run(vllm_decode.run_with_runner(repeats))
        return {"status": "ok", "rows": rows, "runner": runner}
    except Exception as exc:  # recorded; the report is still written
        traceback.print_exc()
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}


def main(argv=None) -> int:
    args = parse_args(argv)
    smoke = args.cpu_smoke or not torch.cuda.is_available()
    device = "cpu" if smoke else "cuda"
    repeats = args.repeats or (1 if smoke else 3)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report = {"mode": "cpu-smoke" if smoke else "cuda", "environment": environment(device)}
    report["gpu_tests"] = {"status": "skipped (no CUDA run)"} if smoke else run_gpu_tests(args.test_timeout)
    report["rows"] = asyncio.run(benchmark(device, smoke, repeats, t0 + args.budget))
    report["vllm_decode"] = vllm_decode_section(smoke, repeats, t0 + args.budget)
    report["vllm"] = vllm_section(smoke, repeats, t0 + args.budget)
    report["seconds"] = time.perf_counter() - t0
    write_report(args.out, report)
    print(f"wrote {args.out / 'gpu_check.md'} and {args.out / 'gpu_check.json'} in {report['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
