"""Chat prompts on the vLLM backend: `set_prompt_from_messages` renders the messages
with the tokenizer's template, Harmony's special tokens as single ids, and the engine
continues that prompt as the HF backend does."""

from __future__ import annotations

import asyncio

import numpy as np
from toys.reasoning import save_reasoning_model
from toys.vllm_engine import engine_opts

from genlm.control import PromptedLLM

MESSAGES = [{"role": "user", "content": "Say ab."}]


def test_chat_prompt_on_vllm_matches_hf(tmp_path):
    folder = str(save_reasoning_model(tmp_path / "model"))
    vllm = PromptedLLM.from_name(folder, backend="vllm", **engine_opts())
    hf = PromptedLLM.from_name(folder, backend="hf")
    try:
        vllm.set_prompt_from_messages(MESSAGES)
        hf.set_prompt_from_messages(MESSAGES)
        tok = vllm.model.tokenizer
        assert vllm.prompt_ids == hf.prompt_ids
        assert vllm.prompt_ids.count(tok.convert_tokens_to_ids("<|start|>")) == 2
        ctx = hf.decode_tokens(tok.encode("<|channel|>final<|message|>a", add_special_tokens=False))
        got = np.asarray(asyncio.run(vllm.logw_next(ctx)).weights, dtype=float)
        want = np.asarray(asyncio.run(hf.logw_next(ctx)).weights, dtype=float)
        np.testing.assert_allclose(got, want, atol=1e-3)
    finally:
        vllm.model.close()
