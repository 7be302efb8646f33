"""The vLLM backend's life cycle: the CLI on it, and an engine closed then a second
one started in the same process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from toys.vllm_engine import vllm_llm

from genlm.control import PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL

PATTERN = r" [0-9]\."


def test_cli_generates_with_backend_vllm():
    """`genlm-control generate --backend vllm` in a fresh interpreter: every
    particle with weight matches the regex."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    args = ["generate", "--backend", "vllm", "--prompt", "The value of x is", "--regex", PATTERN]
    args += ["--particles", "4", "--max-tokens", "6", "--seed", "0", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "genlm.control", *args], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["posterior"], out
    assert sum(r["probability"] for r in out["posterior"]) == pytest.approx(1.0)
    for row in out["posterior"]:
        assert re.fullmatch(PATTERN, row["text"]), row


_ONE_THREAD = """
import asyncio, sys
import numpy as np
import torch
torch.set_num_threads(1)  # before the engine: vLLM's CPU attention must read the same count
sys.path.insert(0, sys.argv[1])
from toys.vllm_engine import vllm_llm
from genlm.control import PromptedLLM
from genlm.control.embedded import EMBEDDED_MODEL
hf = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
hf.set_prompt_from_str("The module")
ctx = hf.tokenize(" value of")
llm = vllm_llm("The module")
for k in range(len(ctx) + 1):  # a new request, then continued in place
    got = asyncio.run(llm.logw_next(ctx[:k])).weights
    np.testing.assert_allclose(got, asyncio.run(hf.logw_next(ctx[:k])).weights, atol=1e-4)
llm.model.close()
print("rows equal")
"""


def test_an_engine_started_after_torch_set_num_threads_gives_the_hf_rows():
    """A process that set torch's thread count before the engine (as benchmarks and
    many scripts do) gets rows: vLLM's CPU attention read OpenMP's default count on the
    engine thread while torch's ops ran with the set one, and the step aborted."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", _ONE_THREAD, tests], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("rows equal")


def test_close_frees_the_engine_and_a_second_one_starts():
    hf = PromptedLLM.from_name(EMBEDDED_MODEL, backend="hf")
    hf.set_prompt_from_str("The module")
    ctx = hf.tokenize(" value")
    want = asyncio.run(hf.logw_next(ctx)).weights
    first = vllm_llm("The module")
    first.model.live_idle_s = 600.0  # the request stays held until close()
    np.testing.assert_allclose(asyncio.run(first.logw_next(ctx)).weights, want, atol=1e-4)
    assert first.model.live_requests() > 0  # the row's request is held
    first.model.close()
    assert first.model.engine is None and first.model.live_requests() == 0
    assert not first.model._driver._thread.is_alive() and not first.model._sink
    first.model.close()  # idempotent
    with pytest.raises(RuntimeError, match="the vLLM engine is closed"):
        asyncio.run(first.logw_next(ctx))
    with vllm_llm("The module").model as backend:
        second = PromptedLLM(backend, prompt_ids=hf.prompt_ids)
        np.testing.assert_allclose(asyncio.run(second.logw_next(ctx)).weights, want, atol=1e-4)
    assert backend.closed
