"""How close to the decode floor SMC can get on the HF backend with no framework at all.

    python benchmarks/backend_floor.py                  # embedded model, N=16, 32 steps, 15 repeats
    python benchmarks/backend_floor.py --repeats 25 --particles 64

`run.py` compares whole SMC runs with the floor (plain batched decoding with
transformers' KV cache, `floor.lm_floor`). This script asks what part of that ratio
the backend alone sets: a bare loop that does only what any SMC step over
`CachedTransformer` must do, with none of the library's samplers, potentials, windows
or SMC driver:

- `in order`: every step asks the backend for the next-token rows of the N contexts
  (`_evaluate_at`, the call `PromptedLLM` makes), draws one token per row by inverse
  CDF in NumPy, and extends the contexts; no resampling, so each forward continues
  the previous one in order;
- `resampled`: the same, resampling the contexts multinomially whenever the ESS of
  stand-in log weight increments (normal, σ = 0.5, seeded) falls below N/2, as an
  SMC run with `ess_threshold=0.5` does;
- `SMC`: the library's own unconstrained run (`direct_token_sampler`, same N, prompt
  and `max_tokens`), for comparison.

Each is timed back to back with the floor, repeat after repeat, and reported as the
median over repeats of its time over the floor's, with the time spent inside the
model's `forward` in each. The backend's caches are cleared before every timed run.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from floor import ForwardClock, lm_floor  # noqa: E402


def bare_loop(backend, prompt: tuple, n: int, steps: int, seed: int, resample: bool) -> int:
    """The bare SMC loop over `backend` (see the module docstring); returns `n · steps`."""
    rng = np.random.default_rng(seed)
    contexts = [prompt] * n
    logw = np.zeros(n)
    for _ in range(steps):
        block, positions = backend._evaluate_at(contexts)
        rows = block.numpy() if positions is None else block.numpy()[positions]
        cdf = np.cumsum(np.exp(rows), axis=1)
        u = rng.random(n) * cdf[:, -1]
        drawn = np.minimum((cdf <= u[:, None]).sum(axis=1), rows.shape[1] - 1)
        contexts = [c + (int(t),) for c, t in zip(contexts, drawn)]
        logw += rng.normal(0.0, 0.5, n)
        w = np.exp(logw - logw.max())
        if resample and w.sum() ** 2 / (w**2).sum() < n / 2:
            contexts = [contexts[i] for i in rng.choice(n, n, p=w / w.sum())]
            logw[:] = 0.0
    return n * steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--particles", type=int, default=16)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from genlm.control import PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    llm.set_prompt_from_str("The function")
    backend, hf = llm.model, llm.model.model
    prompt = tuple(llm.prompt_ids)
    n, steps = args.particles, args.steps
    clock = ForwardClock(hf)
    sampler = direct_token_sampler(llm)

    def smc(seed: int) -> None:
        asyncio.run(sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=steps, seed=seed))

    jobs = {
        "bare loop, in order": lambda seed: bare_loop(backend, prompt, n, steps, seed, False),
        "bare loop, resampled": lambda seed: bare_loop(backend, prompt, n, steps, seed, True),
        "SMC (direct_token_sampler)": smc,
    }

    def timed(call, seed: int) -> tuple[float, float]:
        backend.clear_cache()
        clock.seconds = 0.0
        t0 = time.perf_counter()
        call(seed)
        return time.perf_counter() - t0, clock.seconds

    def floor(seed: int) -> None:
        lm_floor(hf, list(prompt), n, steps, seed)

    for call in (floor, *jobs.values()):  # warm-up
        timed(call, 0)
    results: dict[str, list] = {name: [] for name in jobs}
    floors = []
    for r in range(args.repeats):
        for name, call in jobs.items():
            f_wall, f_fwd = timed(floor, r + 1)
            wall, fwd = timed(call, r + 1)
            results[name].append((wall / f_wall, wall, fwd, f_wall, f_fwd))
            floors.append((f_wall, f_fwd))
    med = statistics.median
    print(f"embedded model, N={n}, {steps} steps, {args.repeats} repeats, threads={args.threads}, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"floor: {1e3 * med(f for f, _ in floors):.1f} ms per run, forward {1e3 * med(f for _, f in floors):.1f} ms")
    print("| loop | ms per run | forward ms | ratio to floor | its forward ÷ floor's forward |")
    print("|---|---:|---:|---:|---:|")
    for name, rows in results.items():
        print(f"| {name} | {1e3 * med(x[1] for x in rows):.1f} | {1e3 * med(x[2] for x in rows):.1f} | "
              f"**{med(x[0] for x in rows):.2f}×** | {med(x[2] / x[4] for x in rows):.2f}× |")


if __name__ == "__main__":
    main()
