"""Problems per second on a pool of Ray actors against one process under asyncio.gather.

    OMP_NUM_THREADS=1 python benchmarks/distributed.py [--problems 32] [--repeats 3]

Each problem is a short regex-constrained SMC run on the embedded model (AWRS over
`llm.constrain(regex=r" [0-9]+\\.")`, 16 particles, at most 16 tokens, its own prompt
and seed). Three ways to solve the same problems with the same seeds:

- `in-process`: one process, the model loaded once, every problem under one
  `asyncio.gather` (their forwards share batches);
- `pool, 1 actor` / `pool, 2 actors`: `genlm.control.distributed.Pool` on a local Ray
  of 2 CPUs (one CPU per actor), each actor holding all its problems at once
  (`concurrency = problems / actors`), so its batches are as large as in-process.

Times exclude loading the model and starting the actors (printed apart); each is the
median of `--repeats` runs after one warm-up run. The pool's overhead per problem is
also measured alone, with a `solve` that returns at once (`--trivial` problems).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import ray  # noqa: E402

from genlm.control.distributed import Pool, problem_seeds  # noqa: E402

ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
SUBJECTS = ["x", "y", "z", "n", "k", "the total", "the answer", "the count"]


def setup():
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    return PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")


async def solve(llm, prompt, seed):
    from genlm.control import AWRS

    llm = llm.spawn()
    llm.set_prompt_from_str(prompt)
    condition = llm.constrain(regex=r" [0-9]+\.")
    seqs = await AWRS(llm, condition).smc(n_particles=16, ess_threshold=0.5, max_tokens=16, seed=seed)
    return float(seqs.log_ml)


async def solve_nothing(state, problem, seed):
    return problem


def prompts(n: int) -> list[str]:
    return [f"Question {i}: the value of {SUBJECTS[i % len(SUBJECTS)]} is" for i in range(n)]


async def timed(run, repeats: int) -> float:
    await run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def in_process(problems: list[str], seeds: list[int], repeats: int) -> tuple[float, float]:
    start = time.perf_counter()
    llm = setup()
    load = time.perf_counter() - start

    async def run():
        await asyncio.gather(*(solve(llm, p, s) for p, s in zip(problems, seeds)))

    return load, await timed(run, repeats)


async def on_pool(actors: int, problems: list[str], seeds: list[int], repeats: int, trivial: int):
    concurrency = -(-len(problems) // actors)
    pool = Pool(setup, actors=actors, cpus_per_actor=1, concurrency=concurrency, env_vars=ENV)
    start = time.perf_counter()
    await pool.start()
    load = time.perf_counter() - start
    try:

        async def run():
            results = await pool.gather(solve, problems, seeds=seeds, progress=False)
            assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]

        async def run_trivial():
            await pool.gather(solve_nothing, range(trivial), progress=False)

        return load, await timed(run, repeats), await timed(run_trivial, repeats)
    finally:
        pool.close()


async def main(n: int, repeats: int, trivial: int) -> None:
    problems, seeds = prompts(n), problem_seeds(n, 0)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"{n} problems, median of {repeats} runs; load average {os.getloadavg()[0]:.2f}")
    load, base = await in_process(problems, seeds, repeats)
    print("| way | start (s) | solve all (s) | problems/s | vs in-process | pool overhead per problem (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| in-process, asyncio.gather | {load:.1f} | {base:.2f} | {n / base:.1f} | 1.00x | — |")
    for actors in (1, 2):
        load, t, t_trivial = await on_pool(actors, problems, seeds, repeats, trivial)
        overhead = 1000 * t_trivial / trivial
        print(
            f"| pool, {actors} actor{'s' if actors > 1 else ''} | {load:.1f} | {t:.2f} | {n / t:.1f} "
            f"| {base / t:.2f}x | {overhead:.2f} |"
        )
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trivial", type=int, default=200, help="problems of the overhead run")
    args = parser.parse_args()
    asyncio.run(main(args.problems, args.repeats, args.trivial))
