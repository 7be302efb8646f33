"""Exactness on vLLM rows: the enumeration of `tests/sampler/test_exactness_llm.py`
(its target, machinery and tolerances) with the LM's rows from a real vLLM engine.

The enumerated target on vLLM rows equals the one on HF rows (every sequence's
weight to 1e-4); seeded runs of the direct sampler and of AWRS (its exact path over
the engine's coercion, and its search path) have E[Ẑ/Z] within 4σ + 0.05 of 1 and
give no weight off the language. Then SMC end to end: four runs gathered on the
shared engine, each equal to the same seeded run made alone.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from toys.vllm_engine import vllm_llm

from genlm.control import AWRS, BoolFSA, PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL


def _load_exactness():
    path = Path(__file__).resolve().parent.parent / "sampler" / "test_exactness_llm.py"
    spec = importlib.util.spec_from_file_location("exactness_llm_machinery", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


X = _load_exactness()


@pytest.fixture(scope="module")
def llm():
    model = vllm_llm(X.PROMPT)
    yield model
    model.model.close()


@pytest.fixture(scope="module")
def conditions(llm):
    fsa = BoolFSA.from_regex(X.PATTERN)
    return {engine: fsa.coerce(llm, f=b"".join, engine=engine) for engine in (None, False)}


@pytest.fixture(scope="module")
def exact(llm, conditions):
    return asyncio.run(X.enumerate_exact(llm, conditions[False], X.MAX_TOKENS))


def test_enumeration_on_vllm_rows_equals_hf(llm, exact):
    hf = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf", prompt_ids=llm.prompt_ids)
    cond = BoolFSA.from_regex(X.PATTERN).coerce(hf, f=b"".join, engine=False)
    want = asyncio.run(X.enumerate_exact(hf, cond, X.MAX_TOKENS))
    X.assert_same_target(exact, want)
    assert len(exact.sequences) == 1497
    assert exact.log_z == pytest.approx(want.log_z, abs=1e-4)


@pytest.mark.parametrize("name", ["direct", "awrs", "awrs-search"])
def test_sampler_unbiased_on_vllm_rows(llm, conditions, exact, name):
    if name == "awrs-search":
        sampler = AWRS(llm, X.Searched(conditions[False]))
        assert not sampler.exact
    else:
        sampler = X.make_sampler(name, llm, conditions[None])
        assert name == "direct" or sampler.exact
    # the search path checks tokens one block at a time: half the runs (the bound is σ-based)
    runs = X.RUNS // 2 if name == "awrs-search" else X.RUNS
    X.check_unbiased(asyncio.run(X.run_smc(sampler, runs, ess_threshold=0.0)), exact)


def test_four_gathered_runs_share_the_engine_and_equal_lone_runs(llm, conditions):
    """SMC end to end with resampling: four seeded runs gathered on one engine
    (their queries batch together) each equal the same run made alone."""
    sampler = AWRS(llm, conditions[None])

    async def runs(seeds):
        return await asyncio.gather(
            *(sampler.smc(n_particles=6, ess_threshold=0.5, max_tokens=X.MAX_TOKENS, seed=s) for s in seeds)
        )

    def fresh(seeds):
        llm.model.clear_cache()  # no kept rows from earlier runs
        return asyncio.run(runs(seeds))

    steps = llm.model.steps
    together = fresh(range(4))
    shared = llm.model.steps - steps
    alone = [fresh([s])[0] for s in range(4)]
    for a, b in zip(together, alone):
        assert [[X.token_bytes(t) for t in c] for c in a.contexts] == [[X.token_bytes(t) for t in c] for c in b.contexts]
        np.testing.assert_allclose(a.log_weights, b.log_weights, atol=1e-4)
        for ctx, w in zip(a.contexts, a.log_weights):
            if w > -math.inf:
                assert re.fullmatch(X.PATTERN.encode(), b"".join(X.token_bytes(t) for t in ctx[:-1]))
    assert shared < llm.model.steps - steps - shared  # gathered runs took fewer engine steps
