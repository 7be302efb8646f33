"""Problems per second on a pool of Ray actors against one process under asyncio.gather.

    OMP_NUM_THREADS=1 python benchmarks/distributed.py [--problems 32] [--repeats 3]

Each problem is a short regex-constrained SMC run on the embedded model (AWRS over
`llm.constrain(regex=r" [0-9]+\\.")`, 16 particles, at most 16 tokens, its own prompt
and seed). Three ways to solve the same problems with the same seeds:

- `in-process`: one process, the model loaded once, every problem under one
  `asyncio.gather` (their forwards share batches);
- `pool, 1 actor` / `pool, 2 actors`: `genlm.control.distributed.Pool` on a local Ray
  (one CPU and one torch thread per actor; the two pools stay up together, so Ray is
  told of 3 CPUs, but only one pool works at a time), each actor holding all its
  problems at once (`concurrency = problems / actors`), so its batches are as large as
  in-process.

Times exclude loading the model and starting the actors (printed apart); each is the
median of `--repeats` runs after a warm-up, the three ways taking turns within each
repeat so that the load of a shared machine falls on all of them alike. The pool's
overhead per problem is also measured alone, with a `solve` that returns at once
(`--trivial` problems).
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


async def interleaved(runs: dict, repeats: int) -> dict[str, float]:
    """The median time of each run, the runs taking turns within each repeat (after
    one warm-up turn), so a change in the machine's load falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats + 1):
        for name, run in runs.items():
            start = time.perf_counter()
            await run()
            if repeat:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


async def started(actors: int, problems: int) -> tuple[Pool, float]:
    concurrency = -(-problems // actors)
    pool = Pool(setup, actors=actors, cpus_per_actor=1, concurrency=concurrency, env_vars=ENV)
    start = time.perf_counter()
    await pool.start()
    return pool, time.perf_counter() - start


def solving(pool: Pool, fn, problems: list, seeds: list[int] | None = None):
    async def run():
        results = await pool.gather(fn, problems, seeds=seeds, progress=False)
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]

    return run


async def main(n: int, repeats: int, trivial: int) -> None:
    problems, seeds = prompts(n), problem_seeds(n, 0)
    # 3 logical CPUs: the 1-actor and 2-actor pools stay up together (only one works at
    # a time); each actor's torch uses one thread.
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    start = time.perf_counter()
    llm = setup()
    loads = {"in-process": time.perf_counter() - start}
    one, loads["1 actor"] = await started(1, n)
    two, loads["2 actors"] = await started(2, n)

    async def in_process():
        await asyncio.gather(*(solve(llm, p, s) for p, s in zip(problems, seeds)))

    try:
        solved = await interleaved(
            {"in-process": in_process, "1 actor": solving(one, solve, problems, seeds),
             "2 actors": solving(two, solve, problems, seeds)},
            repeats,
        )  # fmt: skip
        overhead = await interleaved(
            {"1 actor": solving(one, solve_nothing, list(range(trivial))),
             "2 actors": solving(two, solve_nothing, list(range(trivial)))},
            repeats,
        )  # fmt: skip
    finally:
        one.close()
        two.close()
    print(f"{n} problems, median of {repeats} interleaved runs; load average {os.getloadavg()[0]:.2f}")
    print("| way | start (s) | solve all (s) | problems/s | vs in-process | pool overhead per problem (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    base = solved["in-process"]
    for name, t in solved.items():
        label = "in-process, `asyncio.gather`" if name == "in-process" else f"pool, {name}"
        extra = f"{1000 * overhead[name] / trivial:.2f}" if name in overhead else "—"
        print(f"| {label} | {loads[name]:.1f} | {t:.2f} | {n / t:.1f} | {base / t:.2f}x | {extra} |")
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trivial", type=int, default=200, help="problems of the overhead run")
    args = parser.parse_args()
    asyncio.run(main(args.problems, args.repeats, args.trivial))
