"""Where an SMC step's time goes on a real model, beside the floor's forward and draw.

    python benchmarks/step_split.py                                 # embedded model: unconstrained, regex
    python benchmarks/step_split.py --only unconstrained,regex,json,sql --repeats 20
    python benchmarks/step_split.py --model tekken --only regex     # the suite's 131k-token model
    python benchmarks/step_split.py --particles 1,4,16,64           # fixed and per-particle costs

`run.py` and `real_tokenizers.py` give each workload's ratio to the floor; this script
splits both sides of that ratio. Clocks are put around the library functions a step
calls, and each one's seconds are divided by the steps the runs took (`_steps.py`):

- forward: the model's own `forward` (the same clock times the floor's);
- log-softmax: the HF backend's `kept_log_softmax` of each forward's logits;
- backend bookkeeping: the rest of `CachedTransformer._evaluate_at` (prefix-cache
  lookups and puts, inputs, stacked states, row positions);
- layout: `next_token_rows`, the rows copied into the potential's vocabulary, EOS last;
- EOS entries: `eos_of` (the end twist's prices and EOS folds read without a row);
- constraint mask: the compiled engine's matcher masks (`_packed`) and their unpacking
  (`mask_allowed`);
- draw: `draw._sample_rows` (masses, block sums, inverse CDF);
- rest: the remainder of the run's wall time: the sampler, the SMC driver, windows and
  the potentials' Python.

The floor (`floor.lm_floor`: same model, batch and tokens) is timed back to back with
every run, its forward on the same clock; its "draw and softmax" is its time outside
the forward. Sums over repeats after one warm-up run of each; torch on one thread;
caches cleared before every run. The clocks cost about a microsecond per call, so the
SMC figure here is a little above `run.py`'s.

`--particles` runs each workload at several particle counts instead of its own and
fits, by least squares, each part and the step's excess over the floor
(`SMC - floor`) as `fixed + per_particle * N`: what a step costs the library whatever
its batch, and what each particle adds. A ratio target `r` at `N` particles leaves
`(r - 1) * floor(N)` for that excess.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import os
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
from _steps import counted_steps  # noqa: E402
from floor import ForwardClock, clocked, lm_floor  # noqa: E402

#: (label, module, attribute) of each clocked function; a class is named as "Class.method"
CLOCKED = (
    ("backend (with forward and log-softmax)", "genlm.control.lm._hf_batch", "CachedTransformer._evaluate_at"),
    ("log-softmax", "genlm.control.lm._hf_batch", "kept_log_softmax"),
    ("layout", "genlm.control.lm.llm", "next_token_rows"),
    ("EOS entries", "genlm.control.lm.llm", "eos_of"),
    ("constraint mask", "genlm.control.engine.guided", "GuidedConstraint._packed"),
    ("constraint mask", "genlm.control.engine.guided", "mask_allowed"),
    ("draw", "genlm.control.draw", "_sample_rows"),
)


class Clocks:
    """Seconds per label, from wrappers installed around the `CLOCKED` functions."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._undo: list = []

    def install(self) -> None:
        import importlib

        for label, module, name in CLOCKED:
            owner = importlib.import_module(module)
            *path, attr = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            inner = inspect.getattr_static(owner, attr)
            fn = getattr(owner, attr)
            setattr(owner, attr, self._clocked(label, fn))
            self._undo.append((owner, attr, inner))

    def remove(self) -> None:
        for owner, attr, inner in reversed(self._undo):
            setattr(owner, attr, inner)
        self._undo.clear()

    def _clocked(self, label: str, fn):
        seconds = self.seconds

        def add(elapsed: float) -> None:
            seconds[label] = seconds.get(label, 0.0) + elapsed

        return clocked(fn, add)


def embedded(names: list[str]) -> tuple:
    """(hf model, [(label, llm, sampler, n)]) on the embedded model, as `run.py` builds them."""
    from workloads import JSON_SCHEMA, REGEX, SQL_GRAMMAR

    from genlm.control import AWRS, BoolCFG, BoolFSA, JsonSchema, PromptedLLM, direct_token_sampler
    from genlm.control.embedded import EMBEDDED_MODEL

    base = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    builds = {
        "unconstrained": ("unconstrained (direct, N=16)", "The function", None, 16),
        "regex": ("regex (AWRS, N=10)", "Summary:", lambda: BoolFSA.from_regex(REGEX), 10),
        "json": ("JSON schema (AWRS, N=10)", "Data:", lambda: JsonSchema(JSON_SCHEMA, spelling="canonical"), 10),
        "sql": ("SQL Lark grammar (AWRS, N=10)", "Query:", lambda: BoolCFG.from_lark(SQL_GRAMMAR), 10),
    }
    out = []
    for name in names:
        label, prompt, build, n = builds[name]
        llm = base.spawn()
        llm.set_prompt_from_str(prompt)
        sampler = direct_token_sampler(llm) if build is None else AWRS(llm, build().coerce(llm, f=b"".join))
        out.append((label, llm, sampler, n))
    return base.model.model, out


def tekken(names: list[str]) -> tuple:
    """(hf model, [(label, llm, sampler, n)]) on the suite's tekken model, as
    `real_tokenizers.py` builds them."""
    import real_tokenizers as rt

    base = rt.load("tekken", ["hf"])["hf"]
    out = []
    for name in names:
        label, n = rt.WORKLOADS[name]
        llm = base.spawn()
        llm.set_prompt_from_str(rt.PROMPT)
        out.append((label, llm, rt.sampler_for(llm, name), n))
    return base.model.model, out


async def split(model, label: str, llm, sampler, n: int, tokens: int, repeats: int) -> dict:
    """The clocks' milliseconds per step of `repeats` runs, and the floor's."""
    forward = ForwardClock(model)
    clocks = Clocks()
    prompt = list(llm.prompt_ids)

    async def run(seed: int) -> tuple[float, int]:
        llm.model.clear_cache()
        with counted_steps() as steps:
            start = time.perf_counter()
            await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=tokens, seed=seed)
            return time.perf_counter() - start, steps.most

    await run(0)  # warm-up
    lm_floor(model, prompt, n, tokens, 0)
    gc.collect()
    gc.freeze()
    wall = floor_wall = floor_forward = smc_forward = 0.0
    steps = 0
    clocks.install()
    try:
        for r in range(1, repeats + 1):
            before = forward.seconds
            start = time.perf_counter()
            lm_floor(model, prompt, n, tokens, r)
            floor_wall += time.perf_counter() - start
            floor_forward += forward.seconds - before
            before = forward.seconds
            seconds, taken = await run(r)
            wall += seconds
            steps += taken
            smc_forward += forward.seconds - before
    finally:
        clocks.remove()
        gc.unfreeze()
    per = 1e3 / steps
    s = {k: v * per for k, v in clocks.seconds.items()}
    parts = {
        "forward": smc_forward * per,
        "log-softmax": s.get("log-softmax", 0.0),
        "backend bookkeeping": s.get("backend (with forward and log-softmax)", 0.0) - smc_forward * per - s.get("log-softmax", 0.0),
        "layout": s.get("layout", 0.0),
        "EOS entries": s.get("EOS entries", 0.0),
        "constraint mask": s.get("constraint mask", 0.0),
        "draw": s.get("draw", 0.0),
    }
    parts["rest"] = wall * per - sum(parts.values())
    floor_steps = repeats * tokens
    return {
        "workload": label,
        "smc": wall * per,
        "floor": floor_wall * 1e3 / floor_steps,
        "floor forward": floor_forward * 1e3 / floor_steps,
        "steps per run": steps / repeats,
        "tokens": tokens,
        "parts": parts,
    }


def fit(ns: list[int], values: list[float]) -> tuple[float, float]:
    """`(fixed, per_particle)` of the least-squares line `fixed + per_particle * n`."""
    slope, intercept = np.polyfit(np.asarray(ns, dtype=float), np.asarray(values, dtype=float), 1)
    return float(intercept), float(slope)


def scaling_table(label: str, ns: list[int], rows: list[dict]) -> str:
    """Milliseconds per step of `rows` (one per particle count in `ns`), with each
    line's fit: its fixed milliseconds and its microseconds per particle."""
    by_row = [{"floor": r["floor"], "SMC": r["smc"], "SMC - floor": r["smc"] - r["floor"], **r["parts"]} for r in rows]
    lines = [f"{label}: ms per step by particles, and each line as fixed ms + µs per particle",
             "| ms per step | " + " | ".join(f"N={n}" for n in ns) + " | fixed ms | µs per particle |",
             "|---|" + "---:|" * (len(ns) + 2)]
    for name in by_row[0]:
        values = [row[name] for row in by_row]
        fixed, per = fit(ns, values)
        fixed, per = round(fixed, 2) + 0.0, round(per * 1e3, 1) + 0.0  # no "-0.00" from rounding noise
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {fixed:.2f} | {per:.1f} |")
    return "\n".join(lines)


def table(rows: list[dict]) -> str:
    names = list(rows[0]["parts"])
    head = "| ms per step | floor | " + " | ".join(r["workload"] for r in rows) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(rows)]
    lines.append("| whole step | " + " / ".join(f"{r['floor']:.2f}" for r in rows) + " | "
                 + " | ".join(f"**{r['smc']:.2f}** ({r['smc'] / r['floor']:.2f}×)" for r in rows) + " |")
    lines.append("| steps per run | " + " / ".join(str(r["tokens"]) for r in rows) + " | "
                 + " | ".join(f"{r['steps per run']:.1f}" for r in rows) + " |")
    lines.append("| forward | " + " / ".join(f"{r['floor forward']:.2f}" for r in rows) + " | "
                 + " | ".join(f"{r['parts']['forward']:.2f}" for r in rows) + " |")
    lines.append("| softmax and draw (floor) | " + " / ".join(f"{r['floor'] - r['floor forward']:.2f}" for r in rows)
                 + " |" + " |" * len(rows))
    for name in names[1:]:
        lines.append(f"| {name} | | " + " | ".join(f"{r['parts'][name]:.2f}" for r in rows) + " |")
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", choices=("embedded", "tekken"), default="embedded")
    ap.add_argument("--only", default="unconstrained,regex", help="unconstrained, regex (and on embedded json, sql)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--particles", default="", help="particle counts, comma-separated (e.g. 1,4,16,64): fit fixed + per-particle costs")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = [x for x in args.only.split(",") if x]
    model, jobs = (embedded if args.model == "embedded" else tekken)(names)
    counts = [int(x) for x in args.particles.split(",") if x]
    if len(counts) == 1:
        ap.error("--particles needs at least two counts to fit a line")
    rows, tables = [], []
    for label, llm, sampler, n in jobs:
        if counts:
            name = label.split(" (")[0]
            by_n = []
            for count in counts:
                by_n.append(await split(model, f"{name}, N={count}", llm, sampler, count, args.tokens, args.repeats))
                print(by_n[-1], file=sys.stderr, flush=True)
            tables.append(scaling_table(name, counts, by_n))
            continue
        rows.append(await split(model, label, llm, sampler, n, args.tokens, args.repeats))
        print(rows[-1], file=sys.stderr, flush=True)
    print(f"load average: {os.getloadavg()}; model: {args.model}; {args.repeats} runs of {args.tokens} tokens each")
    print("\n\n".join(tables) if counts else table(rows))


if __name__ == "__main__":
    asyncio.run(main())
