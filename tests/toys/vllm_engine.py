"""A small vLLM engine over the embedded model, for the tests in tests/vllm_backend.

The engine runs in the test process: float32, eager, `max_model_len=256`, 32-token
prefix-cache blocks, 1 GiB of CPU KV cache (`VLLM_CPU_KVCACHE_SPACE`).
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from genlm.control.lm._llm_loading import _vllm_importable  # noqa: E402

HAVE_VLLM = _vllm_importable()
#: Engine options of every test engine.
ENGINE_OPTS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 256, "block_size": 32}


def engine_opts() -> dict:
    """`ENGINE_OPTS`, with a small share of the GPU where there is one."""
    import torch

    opts = dict(ENGINE_OPTS)
    if torch.cuda.is_available():
        opts["gpu_memory_utilization"] = 0.2
    return opts


def vllm_llm(prompt: str | None = None, **opts):
    """A `PromptedLLM` on a fresh vLLM engine over the embedded model."""
    from genlm.control import PromptedLLM
    from genlm.control.embedded import EMBEDDED_MODEL

    llm = PromptedLLM.from_name(EMBEDDED_MODEL, backend="vllm", **{**engine_opts(), **opts})
    if prompt is not None:
        llm.set_prompt_from_str(prompt)
    return llm


async def wait_until(condition, limit_s: float = 30.0) -> None:
    """Wait (polling) until `condition()` holds; fail after `limit_s` seconds."""
    for _ in range(int(limit_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition did not hold in time")
