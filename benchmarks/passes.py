"""Passes over the vocabulary per particle and step, beside plain decoding's.

Run:  python benchmarks/passes.py [--only counts|cpu] [--sizes 4096,131072] [--repeats 5]

Counts (`--only counts`, deterministic: the same on any load) are the O(V) torch
kernels each particle meets per step (`_row_passes.RowPasses`), on rows held as
tensors (`rows="device"`, what a GPU run does; on this CPU the default `"auto"` puts
a model's rows in NumPy after one copy, which this counter does not see):

- the embedded model (4,096 tokens): unconstrained direct N=16, regex / JSON /
  SQL-like Lark AWRS N=10 (the compiled engine's exact path);
- the suite's tekken Llama-shaped model (131,072 tokens, HF), when it builds here
  (`tests/toys/real_tokenizers.py`): unconstrained direct N=16, regex AWRS N=10;
- synthetic tensor rows of 128k tokens (no forward): direct and regex AWRS N=10
  (the byte automaton coerced onto the vocabulary).

Each count's floor is the same counter around plain decoding of the same model
(`floor.lm_floor`, or `floor.row_floor` for fixed rows): the LM head, a softmax, a
cumulative sum and a search per row. "search" is the AWRS search's condition calls
(0: the exact path served every step).

CPU time (`--only cpu`): the framework's own cost per step on the synthetic rows of
`workloads.synthetic_workloads` (NumPy rows, no forward), as process CPU time
(`time.process_time`, so time stolen by other processes on a shared machine is not
counted) in interleaved pairs with `row_floor`; the median of `--repeats` pairs.
Process time still counts torch's worker threads, so torch runs on one thread here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _row_passes import RowPasses, StepCount, floor_passes  # noqa: E402
from floor import lm_floor  # noqa: E402
from workloads import JSON_SCHEMA, MAX_TOKENS, REGEX, SQL_GRAMMAR, SYNTHETIC_REGEX, synthetic_vocab  # noqa: E402

TEKKEN_REGEX = r" [a-z]+( [a-z]+)*\."


def _searches(sampler) -> list:
    """A counter of the AWRS search's condition calls (monkeypatched on `sampler`)."""
    calls = [0]
    if hasattr(sampler, "search"):
        inner = sampler.search

        async def search(*args, **kwargs):
            out = await inner(*args, **kwargs)
            calls[0] += 1 + out.evaluations
            return out

        sampler.search = search
    return calls


async def count_run(label: str, sampler, n: int, v: int, reset=lambda: None) -> dict:
    """One seeded run under `RowPasses`, per particle-step."""
    from genlm.control.draw import counting_readbacks

    reset()
    searched = _searches(sampler)
    with StepCount(sampler) as steps, RowPasses(v) as count, counting_readbacks() as back:
        await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=MAX_TOKENS, seed=0)
    out = count.summary(steps.particle_steps)
    out.update(label=label, v=v, readbacks=back.value / max(steps.calls, 1), search=searched[0])
    return out


def lm_floor_count(hf, prompt_ids: list[int], n: int, v: int) -> dict:
    with torch.no_grad(), RowPasses(v) as count:
        lm_floor(hf, prompt_ids, n, MAX_TOKENS, seed=0)
    return count.summary(n * MAX_TOKENS)


def tensor_row_lm(size: int):
    """An LM over `synthetic_vocab(size)` whose rows are one fixed float32 tensor
    row, copied per step (as a model makes a new row each step)."""
    from genlm.control.potential.base import Potential

    class TensorRowLM(Potential):
        def __init__(self, vocab: list[bytes]):
            super().__init__(vocab)
            ranks = np.random.default_rng(0).permutation(len(vocab) + 1) + 1.0
            row = -1.1 * np.log(ranks)
            self.row = torch.tensor(row - np.logaddexp.reduce(row), dtype=torch.float32)

        async def batch_logw_next(self, contexts):
            return self.rows_to_weights(self.row.expand(len(contexts), -1).clone())

        async def logw_next(self, context):
            return (await self.batch_logw_next([context]))[0]

        async def prefix(self, context):
            return float(sum(float(self.row[self.lookup[t]]) for t in context))

        async def complete(self, context):
            return await self.prefix(context) + float(self.row[-1])

    return TensorRowLM(synthetic_vocab(size))


def _llm_workloads(llm, prompts: dict, names: list[str]):
    from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema, direct_token_sampler

    builds = {
        "regex": lambda: BoolFSA.from_regex(prompts.get("pattern", REGEX)),
        "json": lambda: JsonSchema(JSON_SCHEMA, spelling="canonical"),
        "lark": lambda: BoolCFG.from_lark(SQL_GRAMMAR),
    }
    for name in names:
        child = llm.spawn()
        child.set_prompt_from_str(prompts.get(name, "The function"))
        if name == "unconstrained":
            yield "unconstrained direct", child, direct_token_sampler(child), 16
        else:
            yield f"{name} AWRS", child, AWRS(child, builds[name]().coerce(child, f=b"".join)), 10


async def counts(tekken: bool) -> list[dict]:
    from genlm.control import AWRS, BoolFSA, PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL
    from genlm.control.engine import guided

    # the counter sees the kernels of this thread only: the engine's masks are unpacked
    # here (the same kernels it runs on a worker thread for large blocks)
    guided.OFF_THREAD = 1 << 62
    rows: list[dict] = []
    models = [("embedded", EMBEDDED_MODEL, ["unconstrained", "regex", "json", "lark"], {})]
    if tekken:
        from toys.real_tokenizers import model_dir

        models.append(
            (
                "tekken",
                str(model_dir("tekken")),
                ["unconstrained", "regex"],
                {"pattern": TEKKEN_REGEX},
            )
        )
    prompts = {"regex": "Summary:", "json": "Data:", "lark": "Query:"}
    for model, name, names, extra in models:
        llm = PromptedLLM.from_name(name, backend="hf", rows="device")
        v = len(llm.vocab_eos)
        for label, child, sampler, n in _llm_workloads(llm, {**prompts, **extra}, names):
            row = await count_run(f"{model}: {label}, N={n}", sampler, n, v, llm.model.clear_cache)
            row["floor"] = lm_floor_count(llm.model.model, list(child._start), n, v)
            rows.append(row)
            print(line(row), file=sys.stderr, flush=True)
    lm = tensor_row_lm(128 * 1024)
    v = len(lm.vocab_eos)
    floor = floor_passes(lm.row, 10, MAX_TOKENS, v)
    condition = BoolFSA.from_regex(SYNTHETIC_REGEX).coerce(lm, f=b"".join)
    for label, sampler in (
        ("direct", direct_token_sampler(lm)),
        ("regex AWRS", AWRS(lm, condition)),
    ):
        row = await count_run(f"synthetic 128k: {label}, N=10", sampler, 10, v)
        row["floor"] = floor
        rows.append(row)
        print(line(row), file=sys.stderr, flush=True)
    return rows


def line(r: dict) -> str:
    f = r["floor"]
    return (
        f"| {r['label']} | {r['v']:,} | {r['passes']:.2f} | {f['passes']:.2f} | {r['passes'] / f['passes']:.2f}× "
        f"| {r['bytes'] / 1e6:.2f} | {f['bytes'] / 1e6:.2f} | {r['readbacks']:.1f} | {r['search']} | {r['top']} |"
    )


HEADER = (
    "| workload | V | passes / particle-step | floor | ratio | MB / particle-step | floor MB "
    "| read-backs / step | search calls | largest (passes / particle-step) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


async def cpu(sizes: list[int], repeats: int) -> list[str]:
    """Framework CPU ms per step on synthetic NumPy rows beside `row_floor`'s."""
    from workloads import synthetic_workloads

    out = []
    for w in synthetic_workloads(sizes):
        await w.run(0)  # warm
        smc, floor = [], []
        for seed in range(repeats):
            t0 = time.process_time()
            await w.run(seed)
            t1 = time.process_time()
            w.floor(seed)
            t2 = time.process_time()
            smc.append(t1 - t0)
            floor.append(t2 - t1)
        s, f = statistics.median(smc), statistics.median(floor)
        out.append(
            f"| {w.name} | {1e3 * s / w.steps:.2f} | {1e3 * f / w.steps:.2f} | {s / f:.2f}× |"
        )
        print(out[-1], file=sys.stderr, flush=True)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("counts", "cpu"), default=None)
    ap.add_argument("--sizes", default="4096,131072", help="synthetic sizes for --only cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-tekken", action="store_true", help="skip the 131k tekken model")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.2f} "
        f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; torch {torch.__version__}"
    )
    if args.only in (None, "counts"):
        rows = await counts(not args.no_tekken)
        print(HEADER)
        for r in rows:
            print(line(r))
    if args.only in (None, "cpu"):
        print(
            "| synthetic workload | SMC CPU ms / step | floor CPU ms / step | ratio |\n|---|---:|---:|---:|"
        )
        for r in await cpu([int(s) for s in args.sizes.split(",")], args.repeats):
            print(r)
    print(f"load at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
