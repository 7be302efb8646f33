"""How much slower a forward runs when other work runs between forwards.

    python benchmarks/interleave.py            # 9 repeats, 16 rows, 32 steps

The floor runs its forwards back to back. SMC runs Python between them (its
bookkeeping, the draw, the cache), and that alone makes each forward slower. This
script times only the forwards of the floor's loop in three variants: back to back;
with 2 ms of busy waiting between forwards (no memory traffic); and with four
16×4097 float64 `exp` passes between forwards (about the arrays a step touches).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from genlm.control.embedded import model_path


@torch.no_grad()
def forwards_ms(model, variant: str, n: int, steps: int, gen: torch.Generator) -> float:
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = torch.randint(0, model.config.vocab_size, (n, 5), generator=gen)
    out = model(ids, use_cache=True, **{cache_arg: DynamicCache()})
    spent = 0.0
    for _ in range(steps):
        tokens = torch.randint(0, model.config.vocab_size, (n, 1), generator=gen)
        t0 = time.perf_counter()
        states = getattr(out, "cache", None)
        states = out.past_key_values if states is None else states
        out = model(tokens, use_cache=True, **{cache_arg: states})
        spent += time.perf_counter() - t0
        if variant == "busy 2 ms":
            t1 = time.perf_counter()
            while time.perf_counter() - t1 < 0.002:
                pass
        elif variant == "numpy rows":
            for _ in range(4):
                a = np.random.random((n, model.config.vocab_size + 1))
                np.exp(a, out=a)
    return 1e3 * spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_path()).eval()
    gen = torch.Generator().manual_seed(0)
    variants = ("back to back", "busy 2 ms", "numpy rows")
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for v in variants:
            times[v].append(forwards_ms(model, v, args.rows, args.steps, gen))
    base = statistics.median(times["back to back"])
    print(f"| between forwards | forward time, ms ({args.steps} forwards of {args.rows} rows) | ratio |")
    print("|---|---:|---:|")
    for v in variants:
        m = statistics.median(times[v])
        print(f"| {v} | {m:.1f} | {m / base:.2f}× |")


if __name__ == "__main__":
    main()
