"""Shared pieces of the AWRS benchmarks on the embedded model.

They use the public API only, and run unchanged under genlm-control 0.4.1 (a
reference venv, with `--model` pointing at a copy of the embedded model's directory):
there `coerce` has no `engine` argument and `smc` no `seed`, so a run is seeded through
numpy's global generator and the runs go one at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np

from genlm.control import PromptedLLM
from genlm.control.sampler.sequence import SMC

SEEDED = "seed" in inspect.signature(SMC.__call__).parameters
VERSION = version("genlm-control")
# `engine` of `coerce`: None (the compiled engine where exact), False (automaton / Earley),
# "search" (the automaton without its cheap rows: AWRS's search path).
ENGINES = (None, False, "search") if SEEDED else ("0.4.1",)
AUTOMATON = False if SEEDED else "0.4.1"  # the coercion of the direct sampler's target


def samplers_of(engine) -> tuple[str, ...]:
    """The samplers a coercion is measured with: AWRS only on its search path (the
    direct sampler's rows through a condition without rows would walk every token)."""
    return ("awrs",) if engine == "search" else ("direct", "awrs")


def load_llm(model: str | None, prompt: str) -> PromptedLLM:
    """The embedded model (or the HF directory `model`), prompted with `prompt`."""
    if model is None:
        from genlm.control.embedded import EMBEDDED_MODEL

        model = EMBEDDED_MODEL
    llm = PromptedLLM.from_name(model, backend="hf")
    llm.set_prompt_from_str(prompt)
    return llm


def coerce(condition, llm, engine):
    """`condition.coerce(llm, f=b"".join)` with `engine` where this version has it;
    `"search"`: the automaton's coercion without its cheap rows, so that AWRS takes its
    search path (`Searched` in tests/toys/core.py)."""
    if engine == "0.4.1":
        return condition.coerce(llm, f=b"".join)
    if engine == "search":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from toys import Searched

        return Searched(condition.coerce(llm, f=b"".join, engine=False))
    return condition.coerce(llm, f=b"".join, engine=engine)


def engine_name(engine) -> str:
    return {None: "engine", False: "automaton", "search": "automaton, search path"}.get(engine, str(engine))


async def run_many(
    sampler, seeds, *, n_particles: int, ess_threshold: float, max_tokens: int, group: int = 60, **extra
):
    """One SMC run per seed; `group` runs gathered together where runs take `seed=`
    (`extra`: more keywords of `smc`, such as `budget_aware`)."""
    kwargs = dict(n_particles=n_particles, ess_threshold=ess_threshold, max_tokens=max_tokens, **extra)
    seeds = list(seeds)
    out = []
    if SEEDED:
        for start in range(0, len(seeds), group):
            part = seeds[start : start + group]
            out += await asyncio.gather(*(sampler.smc(**kwargs, seed=s) for s in part))
        return out
    for s in seeds:
        np.random.seed(s)
        random.seed(s)
        out.append(await sampler.smc(**kwargs))
    return out


def token_bytes(token) -> bytes:
    return getattr(token, "byte_string", token)


def text_of(context) -> bytes:
    """The bytes of a finished context (EOS left out)."""
    return b"".join(token_bytes(t) for t in context if isinstance(token_bytes(t), bytes))
