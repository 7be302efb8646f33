"""SMC on real vocabularies against the raw-decode floor on the same model.

    python benchmarks/real_tokenizers.py                   # both models, 3 repeats
    python benchmarks/real_tokenizers.py --kinds tekken --repeats 5 --only unconstrained

The models are the test suite's (`tests/toys/real_tokenizers.py`): Llama-shaped, random
weights, hidden size 32, over Mistral 7B's SentencePiece vocabulary (32,000 tokens) and
Mistral NeMo's tekken byte-level BPE (131,072 tokens). So the forward is small and the
per-step cost over the vocabulary (rows, EOS, masks, draws) is what the ratio shows.
Each workload is timed against `floor.lm_floor` (batched ancestral sampling with a KV
cache, same model, batch and tokens) back to back, as `run.py` does (its `measure`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from floor import lm_floor  # noqa: E402
from run import measure, table  # noqa: E402
from toys.real_tokenizers import KINDS, model_dir  # noqa: E402
from workloads import Workload, smc_job  # noqa: E402

STEPS = 32
PATTERN = r" [a-z]+( [a-z]+)*\."


def workloads(kind: str, names: set[str]) -> list[Workload]:
    from genlm.control import AWRS, BoolFSA, PromptedLLM, direct_token_sampler

    t0 = time.perf_counter()
    base = PromptedLLM.from_name(str(model_dir(kind)), backend="hf")
    print(f"{kind}: |V| = {len(base.vocab_eos)}, loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    hf = base.model.model
    llm = base.spawn()
    llm.set_prompt_from_str("The function")

    def floor_for(n: int):
        return lambda seed, draw="inverse_cdf": lm_floor(hf, list(llm._start), n, STEPS, seed, draw)

    def reset() -> None:
        base.model.clear_cache()

    t0 = time.perf_counter()
    condition = BoolFSA.from_regex(PATTERN).coerce(llm, f=b"".join)
    print(f"{kind}: regex coerced ({type(condition).__name__}) in {time.perf_counter() - t0:.1f} s", flush=True)
    direct = direct_token_sampler(llm)
    awrs = AWRS(llm, condition)
    out = []
    if "unconstrained" in names:
        out.append(Workload(f"{kind} unconstrained (direct, N=16)", 16, STEPS, smc_job(direct, 16, STEPS), floor_for(16), reset, True))
    if "regex" in names:
        out.append(Workload(f"{kind} regex (AWRS, N=10)", 10, STEPS, smc_job(awrs, 10, STEPS), floor_for(10), reset, True))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="unconstrained,regex", help="workloads: unconstrained, regex")
    args = ap.parse_args()
    rows = []
    for kind in args.kinds.split(","):
        for w in workloads(kind, set(args.only.split(","))):
            rows.append(await measure(w, args.repeats))
            print(rows[-1]["name"], f"ratio {rows[-1]['ratio']:.2f}", flush=True)
    print(table(rows, None))


if __name__ == "__main__":
    asyncio.run(main())
