"""The compiled engine's mask unpacking on a worker thread, overlapping the forward.

Run:  python benchmarks/mask_overlap.py [--repeats 4]

Regex AWRS (N=10, 32 tokens) on the suite's tekken model (131,072 tokens, HF, torch on
one thread), with `GuidedConstraint.batch_allowed` unpacking on a worker thread (the
default for blocks of `OFF_THREAD` entries or more) and with it forced onto the event
loop's thread, in interleaved pairs. Reported: wall and process CPU ms per step. On a
shared machine the wall times carry other processes' load; the pairs are interleaved
so that both sides see the same.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from _steps import counted_steps  # noqa: E402

PATTERN = r" [a-z]+( [a-z]+)*\."


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from toys.real_tokenizers import model_dir

    from genlm.control import AWRS, BoolFSA, PromptedLLM
    from genlm.control.engine import guided

    llm = PromptedLLM.from_name(str(model_dir("tekken")), backend="hf")
    llm.set_prompt_from_str("The function")
    sampler = AWRS(llm, BoolFSA.from_regex(PATTERN).coerce(llm, f=b"".join))
    default = guided.OFF_THREAD
    out: dict[str, list] = {"thread": [], "loop": []}
    print(f"load before: {os.getloadavg()}")
    for r in range(args.repeats + 1):
        for mode in ("thread", "loop"):
            guided.OFF_THREAD = default if mode == "thread" else 1 << 62
            guided.HOST_OFF_THREAD = mode == "thread"
            llm.model.clear_cache()
            with counted_steps() as counted:
                w0, c0 = time.perf_counter(), time.process_time()
                await sampler.smc(n_particles=10, ess_threshold=0.5, max_tokens=32, seed=r)
            steps = counted.most
            if r:  # the first pair warms up
                out[mode].append(
                    (
                        1e3 * (time.perf_counter() - w0) / steps,
                        1e3 * (time.process_time() - c0) / steps,
                    )
                )
    guided.OFF_THREAD = default
    guided.HOST_OFF_THREAD = False
    for mode, rows in out.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        print(f"| unpack on the {mode} | {wall:.1f} | {cpu:.1f} |")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
